"""What a killed worker held, and how long until all of it was settled by someone else.

Recovery time of one kill: from the SIGKILL until every stream message the killed consumer
had delivered but not acknowledged (its pending entries, read right after it died) has been
acknowledged or dead-lettered by some consumer — i.e. until everything it was doing has a
durable outcome.  For the ingress (an arq worker): until every job in progress at the kill
has left the queue (finished).  A kill that held nothing has no recovery to measure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from arq.constants import health_check_key_suffix, in_progress_key_prefix
from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.jobs import queue_name
from callgate.keys import STREAM_KINDS, Keys
from callgate.ops.chaos.common import REDIS_AWAY, text
from callgate.streams.service import consumer_name

POLL_S = 0.1
ARQ_WORKERS = frozenset({"ingress"})


@dataclass
class Kill:
    """One SIGKILL and what came of it."""

    kind: str
    name: str
    pid: int
    at: float
    """`time.monotonic()` of the kill."""
    held: tuple[str, ...] = ()
    """``stream message_id`` entries (stream workers) or arq job ids (ingress) it held."""
    recovery_s: float | None = None
    """None while unsettled (or never settled within the limit)."""


async def held_by(redis: aioredis.Redis, settings: Settings, kind: str, pid: int) -> list[str]:
    """What the dead process ``pid`` of worker ``kind`` had in flight."""
    if kind in ARQ_WORKERS:
        jobs = [text(k)[len(in_progress_key_prefix) :]
                async for k in redis.scan_iter(match=f"{in_progress_key_prefix}*")]  # fmt: skip
        # A cron job's marker outlives the job (arq keeps it against double runs).
        return sorted(j for j in jobs if not j.startswith("cron:"))
    keys = Keys(settings.key_prefix, settings.partitions)
    consumer = consumer_name(kind, pid)
    held: list[str] = []
    for stream in (s for k in STREAM_KINDS for s in keys.streams(k)):
        try:
            rows = await redis.xpending_range(stream, kind, "-", "+", 10_000, consumer)
        except ResponseError:  # NOGROUP: this worker does not read that stream
            continue
        held += [f"{stream} {text(r['message_id'])}" for r in rows]
    return held


async def arq_serving(redis: aioredis.Redis, settings: Settings) -> bool:
    """Whether an arq worker (the ingress) has started polling: it records a health check."""
    return bool(await redis.exists(queue_name(settings) + health_check_key_suffix))


async def still_held(redis: aioredis.Redis, settings: Settings, kill: Kill) -> list[str]:
    """Those of ``kill.held`` not settled yet (still pending in the group / still queued)."""
    pipe = redis.pipeline(transaction=False)
    for entry in kill.held:
        if kill.kind in ARQ_WORKERS:
            pipe.zscore(queue_name(settings), entry)
        else:
            stream, message_id = entry.split(" ")
            pipe.xpending_range(stream, kill.kind, message_id, message_id, 1)
    replies = await pipe.execute()
    return [e for e, reply in zip(kill.held, replies, strict=True) if reply]


async def track(
    redis: aioredis.Redis,
    settings: Settings,
    kill: Kill,
    limit_s: float,
    earlier: frozenset[str] = frozenset(),
) -> None:
    """Fill in ``kill.held`` now and ``kill.recovery_s`` once all of it is settled.

    ``earlier``: work an earlier, still unrecovered kill of the same worker held.  arq's
    in-progress markers do not say which process holds a job, so a dead predecessor's jobs
    would otherwise be counted again."""
    while not kill.held and time.monotonic() - kill.at < limit_s:
        try:
            found = await held_by(redis, settings, kill.kind, kill.pid)
            kill.held = tuple(h for h in found if h not in earlier)
            break
        except REDIS_AWAY:
            await asyncio.sleep(POLL_S)
    if not kill.held:
        return
    while time.monotonic() - kill.at < limit_s:
        try:
            if not await still_held(redis, settings, kill):
                kill.recovery_s = round(time.monotonic() - kill.at, 3)
                return
        except REDIS_AWAY:
            pass
        await asyncio.sleep(POLL_S)
