"""What becomes of an outbound delivery (a webhook): delivered once, counted, or dead-lettered.

The delivery job (`callgate.webhooks.deliver`) asks `Outbound` three things, each a single
Redis command off every run's path:

* `delivered` / `mark_delivered` — a per-delivery marker kept for an hour, so an event the
  follower hands over twice (a pass repeated after a crash, a job id arq forgot) is posted
  once;
* `count` — deliveries by endpoint and outcome, the hash `callgate.metrics` reads;
* `dead_letter` — a delivery that used up its retries, written to the partition's dead-letter
  stream with the fields the stream loop writes (stream ``webhooks``, group ``webhooks``), so
  `callgate dead-letters` lists it beside every other message given up on.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

from callgate.connect import RedisClient
from callgate.keys import Keys

STREAM = "webhooks"
"""The ``stream`` and ``group`` a webhook dead letter names."""
DELIVERED_KEPT_S = 3600
"""How long a delivered marker is kept: far longer than a follower's pass can be repeated
(seconds, or minutes for a worker that died mid-pass) and than arq keeps a delivery's result,
which dedups the same way meanwhile; short enough that a busy deployment's markers stay small."""


class Outbound:
    def __init__(self, redis: RedisClient, keys: Keys, retention_s: int, dead_cap: int) -> None:
        self.redis = redis
        self.keys = keys
        self.retention_s = retention_s
        self.dead_cap = dead_cap

    async def delivered(self, delivery_id: str) -> bool:
        return bool(await self.redis.exists(self.keys.webhook_delivered(delivery_id)))

    async def mark_delivered(self, delivery_id: str) -> None:
        await self.redis.set(
            self.keys.webhook_delivered(delivery_id), 1, ex=min(DELIVERED_KEPT_S, self.retention_s)
        )

    async def count(self, endpoint: str, outcome: str) -> None:
        await cast(
            Awaitable[int],
            self.redis.hincrby(self.keys.webhook_stats(), f"{endpoint}|{outcome}", 1),
        )

    async def dead_letter(
        self, run_id: str, delivery_id: str, reason: str, attempts: int, raw: bytes
    ) -> str:
        """Record a delivery given up on in its run's partition; the entry id."""
        stream = self.keys.dead_letter(self.keys.partition(run_id))
        fields: dict[Any, Any] = {
            "stream": STREAM,
            "group": STREAM,
            "message_id": delivery_id,
            "reason": reason,
            "delivery_count": attempts,
            "d": raw,
        }
        entry = await self.redis.xadd(stream, fields, maxlen=self.dead_cap, approximate=True)
        return entry.decode() if isinstance(entry, bytes) else str(entry)
