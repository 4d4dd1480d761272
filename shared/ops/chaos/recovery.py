"""What a killed worker held, and how long until all of it was taken up by a live one.

Recovery time of one kill: from the SIGKILL until every piece of work the dead process held is
either settled or held by a live worker — the time the failure cost, not the time the work
then takes (a reconcile order rechecked through its back-off, a reply waiting for its run to
be idle).  For the stream workers the work is the messages it had delivered but not
acknowledged (its pending entries, read right after it died): each is recovered once it is
acknowledged or dead-lettered, or once another consumer has claimed it.  For the ingress (an
arq worker) it is the jobs in progress at the kill: each is recovered once it has left the
queue or a live worker has started it again (arq counts every start of a job).  A kill that
held nothing has no recovery to measure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from arq.constants import health_check_key_suffix, in_progress_key_prefix, retry_key_prefix
from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.connect import RedisClient
from callgate.jobs import queue_name
from callgate.keys import STREAM_KINDS, Keys
from callgate.ops.chaos.common import REDIS_AWAY, text
from callgate.streams.arq_cluster import health_check_key
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
    """``stream message_id`` entries (stream workers) or ``job_id@starts`` (ingress: the job,
    and how often arq had started it) it held."""
    recovery_s: float | None = None
    """None while unsettled (or never settled within the limit)."""


async def held_by(redis: RedisClient, settings: Settings, kind: str, pid: int) -> list[str]:
    """What the dead process ``pid`` of worker ``kind`` had in flight."""
    if kind in ARQ_WORKERS:
        return await _jobs_in_progress(redis)
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


async def _jobs_in_progress(redis: RedisClient) -> list[str]:
    """``job_id@starts`` of every job an arq worker holds (arq's markers do not say which)."""
    jobs = [text(k)[len(in_progress_key_prefix) :]
            async for k in redis.scan_iter(match=f"{in_progress_key_prefix}*")]  # fmt: skip
    # A cron job's marker outlives the job (arq keeps it against double runs).
    jobs = sorted(j for j in jobs if not j.startswith("cron:"))
    pipe = redis.pipeline(transaction=False)  # one GET each: on a cluster, queues differ in slot
    for job in jobs:
        pipe.get(retry_key_prefix + job)
    starts = await pipe.execute() if jobs else []
    return [f"{job}@{int(n or 0)}" for job, n in zip(jobs, starts, strict=True)]


async def arq_serving(redis: RedisClient, settings: Settings) -> bool:
    """Whether an arq worker (the ingress) has started polling: it records a health check."""
    queue = queue_name(settings)
    key = health_check_key(settings, queue) or queue + health_check_key_suffix
    return bool(await redis.exists(key))


async def still_held(redis: RedisClient, settings: Settings, kill: Kill) -> list[str]:
    """Those of ``kill.held`` neither settled nor taken up by a live worker yet."""
    if kill.kind in ARQ_WORKERS:
        return await _jobs_still_held(redis, settings, kill.held)
    pipe = redis.pipeline(transaction=False)
    for entry in kill.held:
        stream, message_id = entry.split(" ")
        pipe.xpending_range(stream, kill.kind, message_id, message_id, 1)
    replies = await pipe.execute()
    dead = consumer_name(kill.kind, kill.pid)
    return [
        entry
        for entry, pending in zip(kill.held, replies, strict=True)
        if pending and text(pending[0]["consumer"]) == dead
    ]


async def _jobs_still_held(
    redis: RedisClient, settings: Settings, held: tuple[str, ...]
) -> list[str]:
    """The jobs still queued that no worker has started since the kill."""
    pipe = redis.pipeline(transaction=False)
    for entry in held:
        job_id = entry.rpartition("@")[0]
        pipe.zscore(queue_name(settings), job_id)
        pipe.get(retry_key_prefix + job_id)
    replies = await pipe.execute()
    return [
        entry
        for entry, queued, starts in zip(held, replies[::2], replies[1::2], strict=True)
        if queued is not None and int(starts or 0) <= int(entry.rpartition("@")[2])
    ]


async def track(
    redis: RedisClient,
    settings: Settings,
    kill: Kill,
    limit_s: float,
    earlier: frozenset[str] = frozenset(),
) -> None:
    """Fill in ``kill.held`` now and ``kill.recovery_s`` once all of it is settled or taken up.

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
