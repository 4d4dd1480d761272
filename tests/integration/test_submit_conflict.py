"""Idempotent submission on a real private Redis with a real arq worker (burst): the same run id
with the same spec (and verified identity) is the existing run; with a different one it is
refused with `SpecConflictError` — by the ingress when the job reaches it, by the client when
arq drops the job as a duplicate — and the existing run is untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.errors import ConflictError, SpecConflictError
from callgate.ops.cli import main as cli_main
from callgate.services.ingress import start_run
from callgate.streams.service import Runtime
from tests.integration.helpers import drain, new_run_id
from tests.integration.test_ingress_client import turn_messages
from tests.seed import run_spec as spec
from tests.seed import signed_job


async def _untouched(
    client: CallgateClient, runtime: Runtime, redis: aioredis.Redis, run_id: str
) -> None:
    """The run is the first spec's, created once, asked for turn 1 once."""
    status = await client.status(run_id)
    assert (status["input"], status["status"]) == (spec()["input"], "awaiting_model")
    assert len([e for e in await client.events(run_id) if e.type == "run.created"]) == 1
    assert len(await turn_messages(redis, runtime, run_id)) == 1


async def test_the_same_spec_again_is_the_existing_run(
    settings: Settings, client: CallgateClient, runtime: Runtime, redis: aioredis.Redis
) -> None:
    run_id = await client.submit(spec(new_run_id()))
    assert await drain(settings) == (1, 0)
    assert await client.submit(spec(run_id)) == run_id  # arq dropped it: its result is kept
    # Past arq's dedup, with the defaults written out: the same request all the same.
    same = spec(run_id, max_turns=10, batch_policy="hold_effects")
    ctx: dict[str, Any] = {"runtime": runtime, "job_id": run_id}
    assert await start_run(ctx, signed_job(same, run_id)) == {"run_id": run_id, "created": False}
    await _untouched(client, runtime, redis, run_id)


@pytest.mark.parametrize(
    "change",
    [{"input": "Book me a flight to Mars."}, {"max_turns": 3}, {"identity": {"user": "bob"}}],
    ids=["input", "budget", "identity"],
)
async def test_a_different_spec_reaching_the_ingress_is_refused(
    settings: Settings,
    client: CallgateClient,
    runtime: Runtime,
    redis: aioredis.Redis,
    change: dict[str, Any],
) -> None:
    run_id = await client.submit(spec(new_run_id()))
    await drain(settings)
    other = spec(run_id, **change)
    ctx: dict[str, Any] = {"runtime": runtime, "job_id": run_id}
    with pytest.raises(SpecConflictError, match=f"run {run_id} exists with a different spec"):
        await start_run(ctx, signed_job(other, run_id))
    await _untouched(client, runtime, redis, run_id)


async def test_the_client_surfaces_a_conflict_while_arq_keeps_the_first_job(
    settings: Settings, client: CallgateClient, runtime: Runtime, redis: aioredis.Redis
) -> None:
    run_id = await client.submit(spec(new_run_id()))
    await drain(settings)
    with pytest.raises(SpecConflictError) as caught:
        await client.submit(spec(run_id, input="Something else entirely."))
    assert isinstance(caught.value, ConflictError) and caught.value.run_id == run_id
    await _untouched(client, runtime, redis, run_id)


async def test_the_client_surfaces_the_conflict_from_the_job_result(
    settings: Settings, client: CallgateClient, runtime: Runtime, redis: aioredis.Redis
) -> None:
    """arq's dedup lasts only while a result is kept: once it is gone a second job runs, and
    the ingress fails it; ``wait`` reads that, and so does a third submission of it."""
    run_id = await client.submit(spec(new_run_id()))
    await drain(settings)
    await redis.delete(f"arq:result:{run_id}")
    other = spec(run_id, input="Something else entirely.")
    assert await client.submit(other) == run_id  # enqueued: only the ingress can tell
    waiting = asyncio.create_task(client.wait(run_id, timeout_s=10))
    assert await drain(settings) == (0, 1)
    with pytest.raises(SpecConflictError, match=run_id):
        await waiting
    result = orjson.loads(await redis.get(f"arq:result:{run_id}"))
    assert (result["s"], result["r"]["error"]) == (False, "SpecConflictError")
    with pytest.raises(SpecConflictError):
        await client.submit(other)
    with pytest.raises(SpecConflictError):
        await client.wait(run_id, timeout_s=1)
    await _untouched(client, runtime, redis, run_id)


def test_callgate_run_exits_3_on_a_conflict(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = new_run_id()

    async def submit() -> None:
        async with CallgateClient(settings) as c:
            await c.submit(spec(run_id))
        await drain(settings)

    asyncio.run(submit())
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", ",".join(settings.tool_modules))
    argv = [
        "run",
        "--api",
        "openai-responses",
        "--model",
        "travel-demo",
        "--run-id",
        run_id,
        "--identity",
        '{"user": "alice"}',
        "--tools",
        "get_train_status,get_weather",
    ]
    assert cli_main([*argv, "--input", "Something else entirely."]) == 3
    assert "exists with a different spec" in capsys.readouterr().err
    assert cli_main([*argv, "--input", spec()["input"]]) == 0  # the same: the existing run
    assert capsys.readouterr().out.strip() == run_id
