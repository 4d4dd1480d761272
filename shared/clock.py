"""The one clock: wall-clock milliseconds since the epoch, as the ledger stores times.

Every timestamp callgate writes (records, events, expiries, deadlines) comes from here, so a
test or a replay has one place to look, and no module keeps a clock of its own.  The schedule
explorer (`callgate.ops.explore`) swaps in its own clock with `use_clock`, so that a timeout
or an expiry happens when its schedule says, identically on every replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wall_ms() -> int:
    """Milliseconds since the epoch (wall clock)."""
    return time.time_ns() // 1_000_000


_source: Callable[[], int] = wall_ms


def now_ms() -> int:
    """Milliseconds since the epoch: the wall clock unless `use_clock` set another."""
    return _source()


def use_clock(source: Callable[[], int] | None) -> None:
    """Read time from ``source`` from now on (None: the wall clock again)."""
    global _source
    _source = source or wall_ms
