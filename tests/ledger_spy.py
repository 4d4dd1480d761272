"""A spy on the one ledger read a worker does when it cannot decide from what a message
carries: the real read still runs, the test learns that it happened."""

from __future__ import annotations

from typing import Any

from callgate.ledger.store import Ledger


def count_run_and_calls(ledger: Ledger) -> list[str]:
    """The run ids ``ledger.run_and_calls`` is called with from now on, in order."""
    reads: list[str] = []
    read = ledger.run_and_calls

    async def counted(run_id: str, call_ids: Any) -> Any:
        reads.append(run_id)
        return await read(run_id, call_ids)

    ledger.run_and_calls = counted  # type: ignore[method-assign]
    return reads
