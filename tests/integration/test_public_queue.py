"""The public queue's create-only enqueue on a real Redis: a job is written once, and an error
Redis answers inside the enqueue's transaction reaches the submitter instead of passing for
"already queued"."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.jobs import START_RUN, StartJob, queue_name
from callgate.streams.public_queue import enqueue_once

JOB = StartJob(spec={"input": "hi"}, token="t")


async def test_a_job_is_written_once(settings: Settings, redis: aioredis.Redis) -> None:
    assert await enqueue_once(redis, settings, START_RUN, JOB, "pq-once") is True
    assert await enqueue_once(redis, settings, START_RUN, JOB, "pq-once") is False
    assert await redis.zscore(queue_name(settings), "pq-once") is not None


async def test_an_error_inside_the_transaction_is_raised(
    settings: Settings, redis: aioredis.Redis
) -> None:
    await redis.set(queue_name(settings), "not a queue")  # ZADD then answers WRONGTYPE
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await enqueue_once(redis, settings, START_RUN, JOB, "pq-wrong")
