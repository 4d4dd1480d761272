"""The loop's decisions as pure code (`decisions`), and model_turn's in-process helpers
(`asking`, `carry`, `joins`)."""
