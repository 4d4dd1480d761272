"""A live consumer's background upkeep: heartbeats for what it holds, trimming what is settled.

Split from `shared/streams/worker.py`, which reads and runs messages; these two loops only keep the
consumer group healthy around it:

* the heartbeat refreshes the idle time of every message this consumer is still handling
  (``XCLAIM … JUSTID``), so XAUTOCLAIM leaves them alone while a live handler runs long;
* the trim drops from each stream the entries every group has settled (`trim_settled`), so a
  stream holds what is in flight or unread rather than every message ever sent;
* `announce` says every `PRESENCE_S` that the consumer is alive (`Keys.consumers`): Redis 7.0
  lists a consumer in XINFO CONSUMERS only once it was handed a message, and its idle time
  then grows on a quiet deployment, so neither tells a live worker from a dead one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence

from redis.exceptions import ResponseError

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.connect import RedisClient
from callgate.logs import log_fields
from callgate.streams.commands import REDIS_ERRORS, Scripts, trim_settled

log = logging.getLogger("callgate.streams")

Held = Callable[[], Collection[tuple[str, str]]]
"""(stream, message id) of every message the consumer is handling right now."""


class Upkeep:
    """The heartbeat and trim loops of one consumer; run each as a task, cancel to stop."""

    def __init__(
        self,
        redis: RedisClient,
        settings: Settings,
        scripts: Scripts,
        *,
        group: str,
        consumer: str,
        streams: Sequence[str],
        held: Held,
    ) -> None:
        self._redis = redis
        self._settings = settings
        self._scripts = scripts
        self._group = group
        self._consumer = consumer
        self._streams = list(streams)
        self._held = held

    async def heartbeat(self) -> None:
        """Keep our in-flight messages fresh so XAUTOCLAIM leaves them to us."""
        while True:
            await asyncio.sleep(self._settings.heartbeat_ms / 1000)
            in_flight: dict[str, list[str]] = {}
            for stream, message_id in self._held():
                in_flight.setdefault(stream, []).append(message_id)
            if not in_flight:
                continue
            try:
                lost = await self._scripts.heartbeat(self._group, self._consumer, in_flight)
            except REDIS_ERRORS as exc:
                log.warning("heartbeat failed", extra=log_fields(error=repr(exc)))
                continue
            still = set(self._held())  # acked while the heartbeat was on the wire: not lost
            for stream, all_ids in lost.items():
                ids = [i for i in all_ids if (stream, i) in still]
                if ids:
                    log.warning(
                        "another consumer reclaimed in-flight messages; they may run twice",
                        extra=log_fields(stream=stream, message_ids=ids, consumer=self._consumer),
                    )

    async def trim(self) -> None:
        """Every ``stream_trim_s``, trim each stream we read to what is not settled."""
        every_s = self._settings.stream_trim_s
        while every_s > 0:
            await asyncio.sleep(every_s)
            for stream in self._streams:
                try:
                    await trim_settled(self._redis, stream)
                except ResponseError:
                    continue  # no such stream or group (yet): nothing to trim
                except REDIS_ERRORS as exc:
                    log.warning("stream trim failed", extra=log_fields(error=repr(exc)))
                    break


PRESENCE_S = 2.0
"""How often a serving consumer says it is alive; `callgate doctor` takes one silent for five
times as long as gone."""
PRESENCE_KEPT_S = 3600.0


async def announce(redis: RedisClient, key: str, consumer: str) -> None:
    """Until cancelled: ``consumer``'s time (ms) in the sorted set ``key``, every `PRESENCE_S`,
    and entries older than `PRESENCE_KEPT_S` dropped (consumers of processes long gone)."""
    while True:
        now = now_ms()
        try:
            await redis.zadd(key, {consumer: now})
            await redis.zremrangebyscore(key, "-inf", now - PRESENCE_KEPT_S * 1000)
        except REDIS_ERRORS as exc:
            log.warning("presence not recorded", extra=log_fields(error=repr(exc)))
        await asyncio.sleep(PRESENCE_S)
