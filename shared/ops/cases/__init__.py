"""`callgate cases`: a user's own recorded runs as regression cases (export, replay, check)."""
