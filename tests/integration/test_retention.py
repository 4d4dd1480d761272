"""Retention against a real Redis: every key a run made expires when it ends, and the runs
index forgets a run once its keys are gone."""

from __future__ import annotations

import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.keys import Keys
from callgate.ledger.store import Ledger, Tx, now_ms, runs_index
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState, RunState


def _ledger(redis: aioredis.Redis, settings: Settings, retention_s: int = 3600) -> Ledger:
    keys = Keys(settings.key_prefix, settings.partitions)
    return Ledger(redis, keys, settings.model_copy(update={"retention_s": retention_s}))


async def _run_with_everything(ledger: Ledger, run_id: str) -> None:
    """A run with two turns of calls, an approval, history, a raw response and a deadline."""
    keys = ledger.keys
    run = RunRecord(run_id=run_id, api="openai-chat", model="m", input="hi",
                    status=RunState.EXECUTING, turn=2)
    tx = ledger.new_run(run)
    tx.zadd(keys.deadlines(keys.partition(run_id)), {run_id: now_ms() + 60_000})
    for turn in (1, 2):
        call = CallRecord(run_id=run_id, call_id=f"t{turn}.0", turn=turn, index=0,
                          provider_call_id=f"p{turn}", tool="book", state=CallState.SUCCEEDED,
                          approval_id="apr-1" if turn == 2 else None)
        ledger.create_call(tx, call)
        ledger.set_turn_calls(tx, run_id, turn, [call.call_id])
    tx.hset(keys.approval(run_id, "apr-1"), {"state": "approved"})
    ledger.append_history(tx, run_id, [{"role": "user", "content": "hi"}])
    ledger.save_raw_response(tx, run_id, 1, {"id": "r1"})
    assert (await ledger.apply(tx)).ok


async def test_every_key_of_a_finished_run_gets_the_retention(
    redis: aioredis.Redis, settings: Settings
) -> None:
    ledger = _ledger(redis, settings)
    await _run_with_everything(ledger, "run-r1")
    tx = ledger.run_transition(Tx(), "run-r1", RunState.EXECUTING, RunState.HANDED_OFF)
    assert (await ledger.apply(await ledger.expire_finished(tx, "run-r1", 2))).ok

    names = [n async for n in redis.scan_iter(f"{settings.key_prefix}:*run-r1*")]
    kinds = {n.decode().split(":")[2] for n in names}
    assert kinds == {"run", "hist", "raw", "events", "call", "tcalls", "appr", "pcalls"}
    for name in names:
        assert 0 < await redis.ttl(name) <= 3600, name
    deadlines = ledger.keys.deadlines(ledger.keys.partition("run-r1"))
    assert await redis.zscore(deadlines, "run-r1") is None


async def test_fail_run_expires_the_approvals_too(
    redis: aioredis.Redis, settings: Settings
) -> None:
    ledger = _ledger(redis, settings)
    await _run_with_everything(ledger, "run-r2")
    assert await ledger.fail_run("run-r2", "dead letter: poison")
    assert 0 < await redis.ttl(ledger.keys.approval("run-r2", "apr-1")) <= 3600


async def test_the_runs_index_forgets_expired_runs_only(
    redis: aioredis.Redis, settings: Settings
) -> None:
    ledger = _ledger(redis, settings, retention_s=1)
    keys = ledger.keys
    for run_id in ("run-old", "run-paused", "run-new"):
        run = RunRecord(run_id=run_id, api="openai-chat", model="m", input="hi")
        assert await ledger.create_run(run)
    index = runs_index(keys, 0)
    long_ago = now_ms() - 10_000
    await redis.zadd(index, {"run-old": long_ago, "run-paused": long_ago})
    await redis.delete(keys.run("run-old"))  # what its expiry did

    assert await ledger.prune_expired_runs(0, now_ms()) == 1
    assert set(await ledger.run_ids(0)) == {"run-paused", "run-new"}
    assert await ledger.prune_expired_runs(0, now_ms()) == 0
