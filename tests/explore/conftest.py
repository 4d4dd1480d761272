"""The explorer's tests run with its handlers' warnings quiet, and the levels put back after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from callgate.ops.explore.world import quiet_logs


@pytest.fixture(autouse=True)
def _quiet_handlers() -> Iterator[None]:
    with quiet_logs():
        yield
