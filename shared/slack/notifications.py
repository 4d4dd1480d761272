"""Consume approval-requested / unknown-outcome notifications and post each one to Slack.

The notify streams (``keys.stream("notify", p)``) carry plain JSON, not a callgate envelope,
so this is a small consumer-group loop of its own rather than
`callgate.streams.worker.StreamWorker`.
Delivery is at least once: a message is XACKed only after Slack accepted the post; a post
that fails stays pending and is reclaimed (XAUTOCLAIM) after ``claim_idle_ms``, which is the
retry back-off; after ``max_deliveries`` it is dead-lettered with the reason, as are
messages that do not parse.  A crash between the post and the ack posts twice, which is
harmless: both messages carry the same buttons and the validator applies one decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError, ResponseError

from callgate.config import Settings
from callgate.keys import Keys
from callgate.logs import log_fields
from callgate.slack.messages import Notification

log = logging.getLogger("callgate.slack.notifications")

Post = Callable[[Notification], Awaitable[None]]


@dataclass(slots=True)
class ConsumerStats:
    posted: int = 0
    failed: int = 0
    dead_lettered: int = 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NotificationConsumer:
    """One consumer in ``group`` over every partition's notify stream, posting in order."""

    def __init__(
        self, redis: aioredis.Redis, settings: Settings, post: Post, *,
        group: str = "slack_approvals", consumer: str | None = None,
    ) -> None:
        self._redis = redis
        self._settings = settings
        self._post = post
        self._group = group
        self._keys = Keys(settings.key_prefix, settings.partitions)
        self.streams = self._keys.streams("notify")
        self.consumer = consumer or f"{group}-{socket.gethostname()}-{os.getpid()}"
        self._stopping = asyncio.Event()
        self._next_reclaim = 0.0
        self.stats = ConsumerStats()

    def notify_shutdown(self) -> None:
        """Stop after the message in hand (which is acked or left pending, never lost)."""
        self._stopping.set()

    async def run(self) -> None:
        await self._serve(burst=False)

    async def run_burst(self) -> int:
        """Serve until nothing is new or pending; return how many messages were settled."""
        before = self.stats.posted + self.stats.dead_lettered
        await self._serve(burst=True)
        return self.stats.posted + self.stats.dead_lettered - before

    async def _serve(self, *, burst: bool) -> None:
        attempt, ready = 0, False
        while not self._stopping.is_set():
            try:
                if not ready:
                    await self._ensure_groups()
                    ready = True
                started = await self._reclaim() + await self._read()
                if burst and started == 0 and await self._nothing_pending():
                    return
                attempt = 0
            except (RedisError, OSError) as exc:
                if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                    # Redis lost the group (restart without persistence, stream deleted).
                    log.warning("consumer group missing; recreating",
                                extra=log_fields(error=str(exc)))
                    ready = False
                    continue
                delay_s = min(5.0, 0.1 * 2**attempt)
                log.warning("redis unavailable; backing off",
                            extra=log_fields(error=repr(exc), delay_s=delay_s))
                attempt += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay_s)

    async def _ensure_groups(self) -> None:
        for stream in self.streams:
            try:
                await self._redis.xgroup_create(stream, self._group, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _read(self) -> int:
        reply = await self._redis.xreadgroup(
            self._group, self.consumer, dict.fromkeys(self.streams, ">"),
            count=self._settings.read_count, block=self._settings.read_block_ms,
        )
        started = 0
        for name, entries in reply or []:
            for message_id, fields in entries:
                await self._handle(_text(name), _text(message_id), fields, 1)
                started += 1
        return started

    async def _reclaim(self) -> int:
        """Take over messages idle past ``claim_idle_ms``: a dead consumer's or a failed post."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_reclaim:
            return 0
        self._next_reclaim = loop.time() + self._settings.claim_idle_ms / 2000
        started = 0
        for stream in self.streams:
            reply = await self._redis.xautoclaim(
                stream, self._group, self.consumer,
                min_idle_time=self._settings.claim_idle_ms, count=self._settings.read_count,
            )
            for message_id, fields in reply[1]:
                if message_id is None or fields is None:
                    continue
                rows = await self._redis.xpending_range(
                    stream, self._group, message_id, message_id, 1
                )
                count = int(rows[0]["times_delivered"]) if rows else 1
                await self._handle(stream, _text(message_id), fields, count)
                started += 1
        return started

    async def _nothing_pending(self) -> bool:
        for stream in self.streams:
            summary = await self._redis.xpending(stream, self._group)
            if int(summary["pending"]):
                return False
        return True

    async def _handle(
        self, stream: str, message_id: str, fields: dict[Any, Any], count: int
    ) -> None:
        raw = fields.get(b"d", fields.get("d"))
        if raw is None:
            await self._dead(stream, message_id, "message has no 'd' field", count, b"")
            return
        try:
            note = Notification.model_validate_json(raw)
        except ValidationError as exc:
            await self._dead(stream, message_id, f"invalid notification: {exc}", count, raw)
            return
        where = {"run_id": note.run_id, "approval_id": note.approval_id, "type": note.type}
        try:
            await self._post(note)
        except Exception as exc:
            self.stats.failed += 1
            if count >= self._settings.max_deliveries:
                reason = f"failed {count} posts; last error {type(exc).__name__}: {exc}"
                await self._dead(stream, message_id, reason, count, raw)
            else:
                log.warning("posting to Slack failed; left pending for retry",
                            extra=log_fields(error=repr(exc), delivery_count=count, **where))
            return
        # Shielded: the post happened, so a cancellation must not lose the ack.
        await asyncio.shield(self._redis.xack(stream, self._group, message_id))
        self.stats.posted += 1
        log.info("notification posted to Slack", extra=log_fields(**where))

    async def _dead(
        self, stream: str, message_id: str, reason: str, count: int, raw: bytes | str
    ) -> None:
        """XACK + XADD to the slot's dead-letter stream, in one MULTI (same hash slot)."""
        log.error("dead-lettering notification",
                  extra=log_fields(stream=stream, message_id=message_id, reason=reason[:500]))
        pipe = self._redis.pipeline(transaction=True)
        pipe.xack(stream, self._group, message_id)
        pipe.xadd(self._keys.dead_letter_for(stream), {
            "stream": stream, "group": self._group, "message_id": message_id,
            "reason": reason[:2000], "delivery_count": count, "d": raw,
        })
        await asyncio.shield(pipe.execute())
        self.stats.dead_lettered += 1
