"""Chaos's recovery time measures the failure, not the work: a dead worker's message is
recovered once a live consumer holds it, a dead ingress's job once a live worker starts it."""

from __future__ import annotations

import time

import redis.asyncio as aioredis
from arq.constants import in_progress_key_prefix, retry_key_prefix

from callgate.config import Settings
from callgate.jobs import queue_name
from callgate.keys import Keys
from callgate.ops.chaos.recovery import Kill, held_by, still_held
from callgate.streams.service import consumer_name

DEAD_PID, LIVE_PID = 4_000_001, 4_000_002


async def test_a_message_claimed_by_a_live_consumer_is_recovered_before_it_is_acked(
    settings: Settings, redis: aioredis.Redis
) -> None:
    stream = Keys(settings.key_prefix, settings.partitions).streams("exec")[0]
    await redis.xgroup_create(stream, "executor", id="0", mkstream=True)
    message_id = await redis.xadd(stream, {"d": b"{}"})
    dead = consumer_name("executor", DEAD_PID)
    await redis.xreadgroup("executor", dead, {stream: ">"}, count=1)
    kill = Kill("executor", "executor-1", DEAD_PID, time.monotonic())
    kill.held = tuple(await held_by(redis, settings, "executor", DEAD_PID))
    assert len(kill.held) == 1
    assert await still_held(redis, settings, kill) == list(kill.held)

    live = consumer_name("executor", LIVE_PID)
    await redis.xclaim(stream, "executor", live, 0, [message_id])
    assert await redis.xpending(stream, "executor") != {"pending": 0}
    assert await still_held(redis, settings, kill) == []


async def test_a_dead_ingress_job_is_recovered_once_another_worker_starts_it(
    settings: Settings, redis: aioredis.Redis
) -> None:
    job_id = f"{settings.key_prefix}-job"
    await redis.zadd(queue_name(settings), {job_id: 1})
    await redis.set(in_progress_key_prefix + job_id, b"1", px=3000)
    await redis.set(retry_key_prefix + job_id, 1)
    kill = Kill("ingress", "ingress", DEAD_PID, time.monotonic())
    kill.held = tuple(h for h in await held_by(redis, settings, "ingress", DEAD_PID) if job_id in h)
    assert kill.held == (f"{job_id}@1",)
    assert await still_held(redis, settings, kill) == list(kill.held)

    await redis.incr(retry_key_prefix + job_id)  # what arq does when a worker starts the job
    assert await still_held(redis, settings, kill) == []
    await redis.delete(in_progress_key_prefix + job_id, retry_key_prefix + job_id)
