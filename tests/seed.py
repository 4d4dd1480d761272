"""Ledger state written straight into Redis, and jobs as a signed client enqueues them, for
tests that start a worker mid-run or enqueue without the client.

The workers only ever change the ledger through its named steps; a test that needs a run
already validating or a call already allowed seeds those records here, with the same
create-once guards and events the steps write, so what the worker then reads is exactly
what a real run would have left.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from callgate.auth.keyring import LocalKeyring
from callgate.auth.tokens import sign_submission
from callgate.jobs import StartJob
from callgate.ledger.store import Ledger
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, RunRecord


def seed_tx(ledger: Ledger, run: RunRecord, calls: Sequence[CallRecord] = ()) -> Tx:
    """The Tx that creates ``run`` and ``calls`` (and the turn's call list) once."""
    key = ledger.keys.run(run.run_id)
    tx = Tx().expect_missing(key).hset(key, run.to_hash())
    tx.zadd(ledger.keys.runs_index(ledger.keys.partition(run.run_id)), {run.run_id: 1.0})
    for turn in sorted({call.turn for call in calls}):
        ledger.create_calls(tx, sorted((c for c in calls if c.turn == turn), key=lambda c: c.index))
    return tx


async def seed(ledger: Ledger, run: RunRecord, calls: Sequence[CallRecord] = ()) -> None:
    result = await ledger.apply(seed_tx(ledger, run, calls))
    assert result.ok, result


def signed_job(spec: dict[str, Any], run_id: str, signer: str = "local") -> dict[str, Any]:
    """A ``start_run`` job as `CallgateClient.submit` enqueues it: the spec, signed with the
    test keyring's ``signer`` key (a submitter the session's trust file knows)."""
    key = LocalKeyring(Path(os.environ["CALLGATE_HOME"])).signer(signer)
    token = sign_submission(key, run_id=run_id, spec=spec)
    return StartJob(spec=spec, token=token).model_dump(exclude_none=True)


def run_spec(run_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """A valid run spec acting for alice, allowed the train and weather tools; ``run_id`` and
    ``changes`` are set on it, a change to ``None`` leaves that field out."""
    data: dict[str, Any] = {
        "api": "openai-responses",
        "model": "travel-demo",
        "input": "Is my train G1234 on 2026-12-20 on time?",
        "identity": {"user": "alice"},
        "allowed_tools": ["get_train_status", "get_weather"],
        "run_id": run_id,
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}
