"""The tool contract (`contract`), per-call validation outside the model (`policy`), the
argument schema sent to the model (`schema`), canonical arguments (`canonical`), raw-text
guards (`json_guard`) and acceptance rules for a final answer (`acceptance`)."""
