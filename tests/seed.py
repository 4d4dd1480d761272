"""Ledger state written straight into Redis, for tests that start a worker mid-run.

The workers only ever change the ledger through its named steps; a test that needs a run
already validating or a call already allowed seeds those records here, with the same
create-once guards and events the steps write, so what the worker then reads is exactly
what a real run would have left.
"""

from __future__ import annotations

from collections.abc import Sequence

from callgate.ledger.store import Ledger
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, RunRecord


def seed_tx(ledger: Ledger, run: RunRecord, calls: Sequence[CallRecord] = ()) -> Tx:
    """The Tx that creates ``run`` and ``calls`` (and the turn's call list) once."""
    key = ledger.keys.run(run.run_id)
    tx = Tx().expect_missing(key).hset(key, run.to_hash())
    tx.zadd(ledger.keys.runs_index(ledger.keys.partition(run.run_id)), {run.run_id: 1.0})
    for call in calls:
        ledger.create_call(tx, call)
    turns = sorted({call.turn for call in calls})
    for turn in turns:
        ids = [c.call_id for c in sorted(calls, key=lambda c: c.index) if c.turn == turn]
        tx.rpush(ledger.keys.turn_calls(run.run_id, turn), *ids)
    return tx


async def seed(ledger: Ledger, run: RunRecord, calls: Sequence[CallRecord] = ()) -> None:
    result = await ledger.apply(seed_tx(ledger, run, calls))
    assert result.ok, result
