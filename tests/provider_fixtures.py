"""Where the recorded provider wire fixtures are: the project's copy of the handbook's
``provider-fixtures`` (tests/provider_fixtures/), so every clone runs the checks against them."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "provider_fixtures"
HANDBOOK_COPY = Path(__file__).resolve().parents[2] / "shared" / "provider-fixtures"
"""The source the copy was taken from, where the handbook sits beside the repository."""
