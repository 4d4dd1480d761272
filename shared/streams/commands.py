"""The Redis round trips of the stream loop: groups, batched acks, heartbeats, dead letters.

Kept apart from `shared/streams/worker.py` so the loop reads as control flow, and each write here
can be reasoned about on its own:

* acks are batched: every ack that arrives while the previous flush is on the wire goes in
  the next flush, one pipelined round trip with one XACK per stream;
* the heartbeat refreshes in-flight messages with ``XCLAIM … JUSTID`` only where this
  consumer still owns them, so it never steals back a message another consumer reclaimed;
* a dead letter is ``XACK`` + ``XADD`` in one Lua step, and the XADD happens only if the XACK
  removed the entry, so a retried or racing dead-lettering writes exactly one record;
* entries every group has settled are trimmed (``XTRIM MINID``), so a stream holds what is in
  flight or unread, not every message ever sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from callgate.connect import RedisClient, script
from callgate.envelopes import EnvelopeBase, encode
from callgate.logs import log_fields

log = logging.getLogger("callgate.streams")

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError, RedisClusterException)
"""Redis did not answer (or answered an error; or a cluster has no master for a slot yet):
log, back off and try again, never exit."""

_DEAD_LETTER_LUA = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 or ARGV[6] == '1' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'stream', KEYS[1], 'group', ARGV[1],
             'message_id', ARGV[2], 'reason', ARGV[3], 'delivery_count', ARGV[4], 'd', ARGV[5])
  return 1
end
return 0
"""

_HEARTBEAT_LUA = """
local owned, lost = {}, {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 1 then owned[#owned + 1] = ARGV[i] else lost[#lost + 1] = ARGV[i] end
end
if #owned > 0 then
  owned[#owned + 1] = 'JUSTID'
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(owned))
end
return lost
"""


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def post(redis: RedisClient, stream: str, message: EnvelopeBase) -> str:
    """Append one envelope to ``stream`` on its own, not as part of a ledger step: what a
    person's decision or a scheduled expiry is (its reader applies it in a guarded step)."""
    entry_id = await redis.xadd(stream, {"d": encode(message)})
    return text(entry_id)


async def ensure_groups(redis: RedisClient, group: str, streams: list[str]) -> None:
    """Create ``group`` on every stream from "0", so nothing enqueued earlier is lost."""
    for stream in streams:
        try:
            await redis.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


async def delivery_counts(
    redis: RedisClient, stream: str, group: str, consumer: str, ids: list[str]
) -> dict[str, int]:
    """XPENDING's delivery count of each id (one pipelined round trip)."""
    if not ids:
        return {}
    pipe = redis.pipeline(transaction=False)
    for message_id in ids:
        pipe.xpending_range(stream, group, message_id, message_id, 1, consumer)
    counts: dict[str, int] = {}
    for rows in await pipe.execute():
        for row in rows:
            counts[text(row["message_id"])] = int(row["times_delivered"])
    return counts


async def nothing_pending(redis: RedisClient, group: str, streams: list[str]) -> bool:
    """True if no stream has a pending (delivered, unacked) message in ``group``."""
    pipe = redis.pipeline(transaction=False)
    for stream in streams:
        pipe.xpending(stream, group)
    return all(int(summary["pending"]) == 0 for summary in await pipe.execute())


def _stream_id(value: bytes | str) -> tuple[int, int]:
    ms, _, seq = text(value).partition("-")
    return int(ms), int(seq or 0)


async def trim_settled(redis: RedisClient, stream: str) -> int:
    """Drop the entries of ``stream`` that every consumer group has settled; how many went.

    The bound is, per group, its oldest pending entry, or its last delivered one when nothing
    is pending, whichever is older, across groups.  Nothing at or after it goes: not a message
    in flight (a consumer's or a dead one's, waiting to be reclaimed), not one still unread.
    The bound only ever moves forward, so reading it a moment before trimming is safe.  A
    stream without groups is left alone (nobody has read it yet).  Approximate trimming (``~``)
    frees whole stream nodes only: cheap, and it leaves at most a node of settled entries.
    """
    bound: tuple[int, int] | None = None
    for group in await redis.xinfo_groups(stream):
        oldest = _stream_id(group["last-delivered-id"])
        if group["pending"]:
            summary = await redis.xpending(stream, group["name"])
            if summary["min"] is not None:
                oldest = min(oldest, _stream_id(summary["min"]))
        bound = oldest if bound is None else min(bound, oldest)
    if bound is None or bound == (0, 0):
        return 0
    return int(await redis.xtrim(stream, minid=f"{bound[0]}-{bound[1]}", approximate=True))


def backoff_s(attempt: int) -> float:
    """Bounded exponential back-off: 50 ms, 100 ms, … capped at 2 s."""
    return float(min(2.0, 0.05 * 2 ** min(attempt, 6)))


class Acker:
    """Collects acks and flushes them in as few round trips as the traffic allows.

    There is no linger timer: a flush starts as soon as the flusher task runs, and whatever
    finished meanwhile rides on the next one.  Under load that is one round trip per batch of
    messages that finished close together; when idle it adds no latency.
    """

    def __init__(self, redis: RedisClient, group: str) -> None:
        self._redis = redis
        self._group = group
        self._pending: dict[str, list[tuple[str, asyncio.Future[None]]]] = defaultdict(list)
        self._wake = asyncio.Event()
        self._closing = False
        self.flushes = 0
        """Round trips spent on acks, for the tests and for metrics."""

    def ack(self, stream: str, message_id: str) -> asyncio.Future[None]:
        """Queue an ack; the future resolves once Redis has it."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[stream].append((message_id, fut))
        self._wake.set()
        return fut

    async def run(self) -> None:
        """Flush until `close` was called and nothing is left."""
        attempt = 0
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._pending = self._pending, defaultdict(list)
            try:
                await self._flush(batch)
                attempt = 0
            except REDIS_ERRORS as exc:
                # Put the batch back in front; acks are idempotent, so a flush that did reach
                # Redis before the error is harmless to repeat.
                for stream, items in self._pending.items():
                    batch[stream].extend(items)
                self._pending = batch
                log.warning("ack flush failed, retrying", extra=log_fields(error=repr(exc)))
                await asyncio.sleep(backoff_s(attempt))
                attempt += 1

    async def _flush(self, batch: dict[str, list[tuple[str, asyncio.Future[None]]]]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for stream, items in batch.items():
            pipe.xack(stream, self._group, *[message_id for message_id, _ in items])
        await pipe.execute()
        self.flushes += 1
        for items in batch.values():
            for _, fut in items:
                if not fut.done():
                    fut.set_result(None)

    def close(self) -> None:
        """Let `run` return once the queued acks are flushed."""
        self._closing = True
        self._wake.set()

    def abandon(self) -> None:
        """Drop unflushed acks (Redis is gone past the grace): their messages get redelivered."""
        for items in self._pending.values():
            for _, fut in items:
                if not fut.done():
                    fut.cancel()
        self._pending.clear()


class Scripts:
    """The two Lua steps, registered once per client (redis-py reloads them after NOSCRIPT)."""

    def __init__(self, redis: RedisClient) -> None:
        self._redis = redis
        self._dead = script(redis, _DEAD_LETTER_LUA)
        self._heartbeat = script(redis, _HEARTBEAT_LUA)

    async def dead_letter(
        self,
        *,
        stream: str,
        dead_stream: str,
        group: str,
        message_id: str,
        reason: str,
        delivery_count: int,
        raw: bytes,
        cap: int,
        already_removed: bool = False,
    ) -> bool:
        """XACK the entry and XADD its dead letter atomically; False if it was not pending.

        ``already_removed`` records the dead letter even though nothing is left to ack: for
        entries XAUTOCLAIM reports as deleted, which Redis has already dropped from the PEL.
        The dead-letter stream keeps about ``cap`` entries.
        """
        args: list[Any] = [
            group,
            message_id,
            reason,
            delivery_count,
            raw,
            "1" if already_removed else "0",
            cap,
        ]
        written = await self._dead(keys=[stream, dead_stream], args=args)
        return bool(written)

    async def heartbeat(
        self, group: str, consumer: str, in_flight: dict[str, list[str]]
    ) -> dict[str, list[str]]:
        """Refresh every owned in-flight id; return, per stream, the ids this consumer lost.
        One pipeline, or on a cluster (whose pipelines take no script call) one call each."""
        streams = [s for s, ids in in_flight.items() if ids]
        calls = [(stream, [group, consumer, *in_flight[stream]]) for stream in streams]
        if isinstance(self._redis, aioredis.Redis):
            pipe = self._redis.pipeline(transaction=False)
            for stream, args in calls:
                await self._heartbeat(keys=[stream], args=args, client=pipe)
            results = await pipe.execute()
        else:
            beats = (self._heartbeat(keys=[stream], args=args) for stream, args in calls)
            results = await asyncio.gather(*beats)
        lost: dict[str, list[str]] = {}
        for stream, ids in zip(streams, results, strict=True):
            if ids:
                lost[stream] = [text(i) for i in ids]
        return lost
