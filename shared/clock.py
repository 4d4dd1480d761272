"""The one clock: wall-clock milliseconds since the epoch, as the ledger stores times.

Every timestamp callgate writes (records, events, expiries, deadlines) comes from here, so a
test or a replay has one place to look, and no module keeps a clock of its own.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (wall clock)."""
    return time.time_ns() // 1_000_000
