"""The previous release, installed once per session in a venv of its own (`previous_release`)."""

from __future__ import annotations

import pytest

from tests.upgrade.previous_release import (
    Installed,
    PreviousReleaseError,
    install,
    previous_release,
)


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The release before this tree's, installed; a failure (never a skip) if it cannot be."""
    try:
        return install(previous_release(), tmp_path_factory.mktemp("previous-release"))
    except PreviousReleaseError as exc:
        pytest.fail(f"cannot install the previous release to upgrade from: {exc}")
