"""The public arq queue's two writes besides arq's own: a create-only enqueue, and the sweep
that undoes a re-score.

Submitters may write ``arq:job:*`` and the public queue only with SETNX and ZADD
(deploy/redis/users.acl): a job once written is never overwritten, shortened or deleted by
another submitter.  ZADD cannot be narrowed by ACL, so one submitter may re-score another's
queued job into the far future; the ingress puts such entries back (`put_back_rescored`).
The job contract itself is `callgate.jobs`.
"""

from __future__ import annotations

from arq.constants import job_key_prefix
from pydantic import BaseModel
from redis.asyncio import Redis

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.jobs import QUEUE_SKEW_MS, job_serializer, queue_name


async def enqueue_once(
    redis: Redis, settings: Settings, function: str, job: BaseModel, job_id: str
) -> bool:
    """Write a public job create-only; False if a job under ``job_id`` is queued or running
    already.  The queue entry is (re)scored now either way, which undoes someone else's
    re-score of it and is harmless to a job already running."""
    enqueue_ms = now_ms()
    value = job_serializer(
        {"t": 1, "f": function, "a": [job.model_dump(exclude_none=True)], "k": {}, "et": enqueue_ms}
    )
    async with redis.pipeline(transaction=True) as pipe:
        pipe.setnx(job_key_prefix + job_id, value)
        pipe.zadd(queue_name(settings), {job_id: enqueue_ms})
        created, _ = await pipe.execute()
    return bool(created)


async def put_back_rescored(redis: Redis, settings: Settings, limit: int) -> int:
    """Score now every public queue entry scored more than `QUEUE_SKEW_MS` ahead (callgate
    never defers a start or reply job that far); how many, at most ``limit``."""
    name, now = queue_name(settings), now_ms()
    late = await redis.zrangebyscore(name, now + QUEUE_SKEW_MS, "+inf", 0, limit)
    if late:
        # XX: a job that ended meanwhile (its entry removed) is not queued again.
        await redis.zadd(name, dict.fromkeys(late, now), xx=True)
    return len(late)
