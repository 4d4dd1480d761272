"""Ingress + client on a real private Redis with a real arq worker (burst, in process and as
``python -m callgate.services.ingress --burst``): one run per run id, nothing for an invalid spec,
``wait`` wakes on the status change, the deadline sweep hands off."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from arq.connections import ArqRedis

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import ApprovalExpired, TurnRequest, decode
from callgate.errors import JobFailedError, NotFoundError, RunSpecError
from callgate.jobs import START_RUN
from callgate.ledger.tx import Tx
from callgate.services.ingress import start_run
from callgate.states import RunState
from callgate.streams.service import Runtime
from callgate.sweeps import sweep_approvals, sweep_deadlines
from tests.integration.helpers import drain, new_run_id
from tests.seed import run_spec as spec
from tests.seed import signed_job


async def turn_messages(redis: aioredis.Redis, runtime: Runtime, run_id: str) -> list[TurnRequest]:
    entries = await redis.xrange(runtime.keys.run_stream("turns", run_id))
    messages = [decode(fields[b"d"]) for _, fields in entries]
    return [m for m in messages if isinstance(m, TurnRequest) and m.run_id == run_id]


async def test_same_run_id_twice_creates_one_run_and_one_turn_request(
    settings: Settings, client: CallgateClient, runtime: Runtime, redis: aioredis.Redis
) -> None:
    run_id = new_run_id()
    assert await client.submit(spec(run_id)) == run_id
    assert await drain(settings) == (1, 0)
    assert await client.submit(spec(run_id)) == run_id  # arq dedups while the result is kept
    await drain(settings)
    # Past arq's dedup (its result expired, or another path): the ledger's create-once guard.
    again = await start_run(
        {"runtime": runtime, "job_id": "other"}, signed_job(spec(run_id), run_id)
    )
    assert again == {"run_id": run_id, "created": False}

    status = await client.status(run_id)
    assert status["status"] == "awaiting_model" and status["turn"] == 1
    [message] = await turn_messages(redis, runtime, run_id)
    assert (message.turn, message.reason) == (1, "start")
    assert await runtime.ledger.history(run_id) == [{"role": "user", "content": spec()["input"]}]
    created = [e for e in await client.events(run_id) if e.type == "run.created"]
    assert len(created) == 1


async def test_run_id_defaults_to_the_job_id(
    settings: Settings, pool: ArqRedis, client: CallgateClient
) -> None:
    job_id = new_run_id()
    await pool.enqueue_job(START_RUN, signed_job(spec(), job_id), _job_id=job_id)
    assert await drain(settings) == (1, 0)
    assert (await client.status(job_id))["run_id"] == job_id


async def test_invalid_spec_creates_nothing_and_says_why(
    settings: Settings,
    pool: ArqRedis,
    client: CallgateClient,
    runtime: Runtime,
    redis: aioredis.Redis,
) -> None:
    run_id = new_run_id()
    with pytest.raises(RunSpecError, match="max_turn: unknown field"):
        await client.submit(spec(run_id, max_turn=3))  # the client checks before enqueueing
    await pool.enqueue_job(START_RUN, signed_job(spec(run_id, max_turn=3), run_id), _job_id=run_id)
    bad_tools = new_run_id()
    await pool.enqueue_job(
        START_RUN,
        signed_job(spec(bad_tools, allowed_tools=["no_such_tool"]), bad_tools),
        _job_id=bad_tools,
    )
    assert await drain(settings) == (0, 2)

    for rid in (run_id, bad_tools):
        assert not await redis.exists(runtime.keys.run(rid))
        assert not await redis.exists(runtime.keys.events(rid))
        assert await turn_messages(redis, runtime, rid) == []
    result = orjson.loads(await redis.get(f"arq:result:{run_id}"))  # JSON, readable anywhere
    assert (result["s"], result["r"]["error"]) == (False, "RunSpecError")
    with pytest.raises(JobFailedError, match="max_turn: unknown field"):
        await client.wait(run_id, timeout_s=2)
    with pytest.raises(JobFailedError, match="no_such_tool not registered in this deployment"):
        await client.status(bad_tools)
    with pytest.raises(NotFoundError):
        await client.status(new_run_id())


async def test_wait_returns_when_the_run_becomes_terminal(
    settings: Settings, client: CallgateClient, runtime: Runtime
) -> None:
    run_id = await client.submit(spec())
    waiter = asyncio.create_task(client.wait(run_id, timeout_s=10))
    await drain(settings)
    await asyncio.sleep(0.3)
    assert not waiter.done(), "awaiting_model is neither terminal nor paused"

    tx = runtime.ledger.run_transition(
        Tx(),
        run_id,
        RunState.AWAITING_MODEL,
        RunState.COMPLETED,
        expect_turn=1,
        fields={"final_text": "On time."},
    )
    started = time.monotonic()
    assert (await runtime.ledger.apply(tx)).ok
    status = await asyncio.wait_for(waiter, timeout=5)
    assert time.monotonic() - started < 0.5, "woken by the event stream, not a long poll"
    assert status["status"] == "completed"
    view = await client.view(run_id)
    assert (view["final_text"], view["turns"], view["calls"]) == ("On time.", 1, [])
    assert view["usage"] == {"input_tokens": 0, "output_tokens": 0}


async def test_wait_times_out_with_the_current_status(client: CallgateClient) -> None:
    run_id = await client.submit(spec())
    with pytest.raises(TimeoutError, match="not created"):
        await client.wait(run_id, timeout_s=0.3)


async def test_deadline_sweep_hands_off_once(
    settings: Settings, client: CallgateClient, runtime: Runtime, redis: aioredis.Redis
) -> None:
    late = await client.submit(spec(deadline_s=0.05))
    later = await client.submit(spec(deadline_s=600.0))
    await drain(settings)
    await asyncio.sleep(0.1)
    ctx: dict[str, Any] = {"runtime": runtime}
    assert await sweep_deadlines(ctx) == 1
    status = await client.status(late)
    assert (status["status"], status["reason"]) == ("handed_off", "deadline reached")
    assert (await client.status(later))["status"] == "awaiting_model"
    assert await sweep_deadlines(ctx) == 0
    index = runtime.keys.deadlines(0)
    assert await redis.zrange(index, 0, -1) == [later.encode()]
    assert await redis.ttl(runtime.keys.run(late)) > 0, "a finished run's keys expire"


async def test_approval_sweep_expires_only_pending_approvals_past_their_time(
    runtime: Runtime, redis: aioredis.Redis
) -> None:
    """The backstop for a lost ``expire_approval`` job: it posts the expiry, once per sweep,
    only for approvals still pending and past their time; the validator applies it."""
    now = int(time.time() * 1000)
    keys = runtime.keys
    for approval_id, state, expires_ms in (
        ("apr-late", "pending", now - 1000),
        ("apr-decided", "approved", now - 1000),
        ("apr-live", "pending", now + 600_000),
    ):
        record = ApprovalRecord(
            approval_id=approval_id,
            run_id="r-sweep",
            turn=1,
            call_id=f"c-{approval_id}",
            tool="reserve_seat",
            tool_version="1",
            args_hash="h",
            arguments="{}",
            requested_by="alice",
            approver_role="events-lead",
            expires_ms=expires_ms,
            state=state,
        )
        await redis.hset(keys.approval("r-sweep", approval_id), mapping=record.to_hash())  # type: ignore[misc]
        await redis.zadd(
            keys.pending_approvals(keys.partition("r-sweep")),
            {f"r-sweep {approval_id}": expires_ms},
        )
    assert await sweep_approvals({"runtime": runtime}) == 1
    entries = await redis.xrange(keys.run_stream("decisions", "r-sweep"))
    [expired] = [decode(fields[b"d"]) for _, fields in entries]
    assert isinstance(expired, ApprovalExpired)
    assert (expired.approval_id, expired.call_id, expired.turn) == ("apr-late", "c-apr-late", 1)


async def test_approval_sweep_drops_entries_whose_approval_no_longer_waits(
    runtime: Runtime, redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries whose record expired with its run (or was decided) leave the pending index, so
    they cannot fill every batch and keep a live approval past its time from being expired."""
    monkeypatch.setattr("callgate.sweeps.SWEEP_BATCH", 2)
    now, keys = int(time.time() * 1000), runtime.keys
    index = keys.pending_approvals(keys.partition("r-gone"))
    await redis.zadd(index, {"r-gone apr-1": now - 3000, "r-gone apr-2": now - 2000})
    record = ApprovalRecord(
        approval_id="apr-due",
        run_id="r-gone",
        turn=1,
        call_id="c-due",
        tool="reserve_seat",
        tool_version="1",
        args_hash="h",
        arguments="{}",
        requested_by="alice",
        approver_role="events-lead",
        expires_ms=now - 1000,
    )
    await redis.hset(keys.approval("r-gone", "apr-due"), mapping=record.to_hash())  # type: ignore[misc]
    await redis.zadd(index, {"r-gone apr-due": now - 1000})
    assert await sweep_approvals({"runtime": runtime}) == 0  # two stale entries fill the batch
    assert await redis.zrange(index, 0, -1) == [b"r-gone apr-due"]
    assert await sweep_approvals({"runtime": runtime}) == 1  # the live one is reached next


def test_module_entry_point_runs_queued_jobs(
    settings: Settings, subprocess_env: dict[str, str]
) -> None:
    run_id = new_run_id()

    async def submit() -> None:
        async with CallgateClient(settings) as c:
            await c.submit(spec(run_id))

    asyncio.run(submit())
    proc = subprocess.run(
        [sys.executable, "-m", "callgate.services.ingress", "--burst"],
        env=subprocess_env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]

    async def check() -> dict[str, Any]:
        async with CallgateClient(settings) as c:
            return await c.status(run_id)

    assert asyncio.run(check())["status"] == "awaiting_model"
