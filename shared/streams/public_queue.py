"""The public arq queue's two writes besides arq's own: a create-only enqueue, and the sweep
that undoes a re-score.

Submitters may write ``arq:job:*`` and the public queue only with SETNX and ZADD
(deploy/redis/users.acl): a job once written is never overwritten, shortened or deleted by
another submitter.  ZADD cannot be narrowed by ACL, so one submitter may re-score another's
queued job into the far future; the ingress puts such entries back (`put_back_rescored`).
The job contract itself is `callgate.jobs`.

With ``CALLGATE_WRITE_DURABILITY=replica`` the enqueue is confirmed like a write's intent
(`callgate.ledger.durable`): ``WAIT`` for a replica on the connection that wrote the job, so a
failover right after a submission cannot lose a run its submitter was told is queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arq.constants import job_key_prefix
from pydantic import BaseModel
from redis.asyncio import Redis

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.connect import RedisClient, slot_client
from callgate.errors import RedisUnavailableError
from callgate.jobs import QUEUE_SKEW_MS, job_serializer, queue_name
from callgate.ledger.durable import REPLICAS
from callgate.streams.arq_cluster import cluster_job_id


async def enqueue_once(
    redis: RedisClient, settings: Settings, function: str, job: BaseModel, job_id: str
) -> bool:
    """Write a public job create-only; False if a job under ``job_id`` is queued or running
    already.  The queue entry is (re)scored now either way, which undoes someone else's
    re-score of it and is harmless to a job already running.  Under ``replica`` durability,
    `RedisUnavailableError` when no replica holds it in time: submit again, harmless under
    the same id."""
    enqueue_ms, queue = now_ms(), queue_name(settings)
    arq_id = cluster_job_id(settings, queue, job_id)  # in the queue's slot on a cluster
    value = job_serializer(
        {"t": 1, "f": function, "a": [job.model_dump(exclude_none=True)], "k": {}, "et": enqueue_ms}
    )
    commands: list[tuple[Any, ...]] = [
        ("MULTI",),
        ("SETNX", job_key_prefix + arq_id, value),
        ("ZADD", queue, enqueue_ms, arq_id),
        ("EXEC",),
    ]
    if settings.write_durability == "replica":
        commands.append(("WAIT", REPLICAS, settings.durability_wait_ms))
    replies = await on_one_connection(await slot_client(redis, queue), commands)
    for reply in replies[3]:  # EXEC's: an error inside it comes back as a value
        if isinstance(reply, Exception):
            raise reply
    created = bool(replies[3][0])
    if commands[-1][0] == "WAIT" and replies[-1] < REPLICAS:
        raise RedisUnavailableError(
            f"job {job_id} was written but no replica confirmed it within "
            f"{settings.durability_wait_ms} ms; submit it again (the same id is harmless)"
        )
    return created


async def on_one_connection(redis: Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` on one connection held for them all and read every reply: WAIT
    counts the writes of the connection it is sent on, which a pooled client's next command
    need not be."""
    pool = redis.connection_pool
    connection = await pool.get_connection()
    try:
        await connection.send_packed_command(connection.pack_commands(commands))
        return [await connection.read_response() for _ in commands]
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)


async def put_back_rescored(redis: RedisClient, settings: Settings, limit: int) -> int:
    """Score now every public queue entry scored more than `QUEUE_SKEW_MS` ahead (callgate
    never defers a start or reply job that far); how many, at most ``limit``."""
    name, now = queue_name(settings), now_ms()
    late = await redis.zrangebyscore(name, now + QUEUE_SKEW_MS, "+inf", 0, limit)
    if late:
        # XX: a job that ended meanwhile (its entry removed) is not queued again.
        await redis.zadd(name, dict.fromkeys(late, now), xx=True)
    return len(late)
