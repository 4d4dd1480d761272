"""Retention against a real Redis: every key a run made expires when it ends, and the runs
index and the inbox forget a run once its keys are gone."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.keys import Keys
from callgate.ledger.base import LOG_OUTLIVES_S
from callgate.ledger.store import Ledger
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState, RunState


def _ledger(redis: aioredis.Redis, settings: Settings, retention_s: int = 3600) -> Ledger:
    keys = Keys(settings.key_prefix, settings.partitions)
    return Ledger(redis, keys, settings.model_copy(update={"retention_s": retention_s}))


async def _run_with_everything(ledger: Ledger, run_id: str) -> RunRecord:
    """A run with two turns of calls, an approval, history, a raw response and a deadline."""
    keys = ledger.keys
    run = RunRecord(
        run_id=run_id,
        api="openai-chat",
        model="m",
        input="hi",
        status=RunState.EXECUTING,
        turn=2,
        deadline_ms=now_ms() + 60_000,
    )
    tx = ledger.start_run(run, [{"role": "user", "content": "hi"}])
    for turn in (1, 2):
        call = CallRecord(
            run_id=run_id,
            call_id=f"t{turn}.0",
            turn=turn,
            index=0,
            provider_call_id=f"p{turn}",
            tool="book",
            state=CallState.SUCCEEDED,
            approval_id="apr-1" if turn == 2 else None,
        )
        ledger.create_calls(tx, [call])
    approval = ApprovalRecord(
        approval_id="apr-1", run_id=run_id, turn=2, call_id="t2.0", tool="book",
        tool_version="1", args_hash="h" * 64, arguments="{}", requested_by="alice",
        approver_role="ops", expires_ms=now_ms() + 60_000,
    )  # fmt: skip
    ledger.request_approval(tx, approval, {})
    tx.hset(keys.raw_responses(run_id), {"1": '{"id": "r1"}'})
    assert (await ledger.apply(tx)).ok
    return run


@pytest.mark.parametrize(
    ("end", "reason"),
    [(RunState.HANDED_OFF, "deadline reached"), (RunState.FAILED, "dead letter: poison")],
)
async def test_every_key_of_a_finished_run_gets_the_retention(
    redis: aioredis.Redis, settings: Settings, end: RunState, reason: str
) -> None:
    """However the run ends, its approvals expire with the rest."""
    ledger = _ledger(redis, settings)
    run = await _run_with_everything(ledger, "run-r1")
    ended = await ledger.end_run(run, end, reason)
    assert (await ledger.apply(ended)).ok

    names = [n async for n in redis.scan_iter(f"{settings.key_prefix}:*run-r1*")]
    kinds = {n.decode().split(":")[2] for n in names}
    assert kinds == {"run", "hist", "raw", "events", "call", "index", "appr"}
    for name in names:  # the log a second after the rest (LOG_OUTLIVES_S)
        assert 0 < await redis.ttl(name) <= 3600 + LOG_OUTLIVES_S, name
    deadlines = ledger.keys.deadlines(ledger.keys.partition("run-r1"))
    assert await redis.zscore(deadlines, "run-r1") is None


async def test_the_runs_index_forgets_expired_runs_only(
    redis: aioredis.Redis, settings: Settings
) -> None:
    ledger = _ledger(redis, settings, retention_s=1)
    keys = ledger.keys
    for run_id in ("run-old", "run-paused", "run-new"):
        run = RunRecord(run_id=run_id, api="openai-chat", model="m", input="hi")
        assert (await ledger.apply(ledger.start_run(run, []))).ok
    index = keys.runs_index(0)
    long_ago = now_ms() - 10_000
    await redis.zadd(index, {"run-old": long_ago, "run-paused": long_ago})
    await redis.delete(keys.run("run-old"))  # what its expiry did

    assert await ledger.prune_expired_runs(0, now_ms()) == 1
    assert set(await ledger.run_ids(0)) == {"run-paused", "run-new"}
    assert await ledger.prune_expired_runs(0, now_ms()) == 0


async def test_the_inbox_forgets_unresolved_calls_whose_run_expired(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """A run cancelled with a write still unresolved expires with that call; its inbox entry
    goes at the next sweep, while an older entry whose call is still recorded stays."""
    ledger = _ledger(redis, settings, retention_s=1)
    keys = ledger.keys
    for run_id in ("run-gone", "run-waiting"):
        run = RunRecord(run_id=run_id, api="openai-chat", model="m", input="hi")
        tx = ledger.start_run(run, [])
        ledger.create_calls(
            tx,
            [
                CallRecord(
                    run_id=run_id,
                    call_id="t1.0",
                    turn=1,
                    index=0,
                    provider_call_id="p1",
                    tool="book",
                    state=CallState.UNRESOLVED,
                )
            ],
        )
        assert (await ledger.apply(tx)).ok
    inbox = keys.unresolved_calls(0)
    long_ago = now_ms() - 10_000
    await redis.zadd(inbox, {"run-gone t1.0": long_ago, "run-waiting t1.0": long_ago})
    await redis.delete(keys.run("run-gone"), keys.call("run-gone", "t1.0"))  # its expiry

    await ledger.prune_expired_runs(0, now_ms())
    assert [m.decode() for m in await redis.zrange(inbox, 0, -1)] == ["run-waiting t1.0"]
