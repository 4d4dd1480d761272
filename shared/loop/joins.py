"""One join of a turn's results at a time in a process.

The results of a turn's parallel calls are recorded together and read in one batch, so each
of them would read the turn, find every call settled and try to advance it: every attempt
but one is a wasted read and a step that fails its guard.  A result that arrives while an
earlier one of the same turn is being joined waits for it instead, and does nothing if that
join left the turn settled.  Across processes the ledger's guards still decide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable


class TurnJoins:
    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[bool]] = {}

    async def join(self, turn: Hashable, work: Callable[[], Awaitable[bool]]) -> None:
        """Run ``work`` (True: the turn no longer waits for results) unless a join of
        ``turn`` already running here ends with True."""
        earlier = self._running.get(turn)
        if earlier is not None and await asyncio.shield(earlier):
            return
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._running[turn] = done
        settled = False
        try:
            settled = await work()
        finally:
            if self._running.get(turn) is done:
                del self._running[turn]
            done.set_result(settled)

    def __len__(self) -> int:
        return len(self._running)
