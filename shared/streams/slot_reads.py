"""`SlotReads`: a consumer's XREADGROUP through redis-py, one read per slot on a Redis Cluster.

One XREADGROUP may name several streams only if they share a slot; a worker's streams are in
their partitions' slots (`callgate.keys`), so a cluster refuses the one read across them that a
single server takes (CROSSSLOT).  Here each slot has its own blocking read (to the master of
that slot, on a connection of its own), and a call returns as soon as any of them answered.
The others stay in flight for the next call rather than being cancelled: a cancelled read
drops its connection, and a read Redis had already answered would leave its messages pending
until they are reclaimed.  A read answering after the budget it was sent for was spent
starts its messages anyway (the worker's slots run briefly over, by at most one read's count
per slot).  On one server there is one read across every stream (a worker whose reads go over
a bare hiredis connection uses `callgate.ledger.wire.BlockingReads` instead).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from callgate.connect import RedisClient
from callgate.keys import slot_of

Answer = list[Any]
"""Messages as XREADGROUP returns them: ``[(stream, [(id, fields), …]), …]``."""
SLACK_S = 5.0
"""How much longer than its BLOCK a read may take before a call gives up waiting for it (it
stays in flight): a server that stopped answering must not stop the worker's loop."""


class SlotReads:
    """The in-flight reads of one consumer, by slot."""

    def __init__(self, redis: RedisClient, group: str, consumer: str) -> None:
        self._redis = redis
        self._group = group
        self._consumer = consumer
        self._reading: dict[int, asyncio.Task[Answer]] = {}
        self._cluster = not isinstance(redis, aioredis.Redis)

    async def read(self, streams: list[str], count: int, block_ms: int) -> Answer:
        """Messages of ``streams`` (``count`` per stream), once any read answered or
        ``block_ms`` passed with none.  A failed read raises its error only if no other
        answered (a kept answer is never dropped for another's error)."""
        by_slot: dict[int, list[str]] = {}
        for stream in streams:
            by_slot.setdefault(slot_of(stream) if self._cluster else 0, []).append(stream)
        for slot, named in by_slot.items():
            if slot not in self._reading:
                self._reading[slot] = asyncio.create_task(self._one(named, count, block_ms))
        await asyncio.wait(
            list(self._reading.values()),
            timeout=block_ms / 1000 + SLACK_S,
            return_when=asyncio.FIRST_COMPLETED,
        )
        answered: Answer = []
        failed: BaseException | None = None
        for slot, task in list(self._reading.items()):
            if task.done():
                del self._reading[slot]
                failed = task.exception() or failed
                answered.extend([] if task.exception() else task.result())
        if failed is not None and not answered:
            raise failed
        return answered

    async def _one(self, streams: list[str], count: int, block_ms: int) -> Answer:
        reply = await self._redis.xreadgroup(
            self._group, self._consumer, dict.fromkeys(streams, ">"), count=count, block=block_ms
        )
        return list(reply.items()) if isinstance(reply, dict) else list(reply or [])

    async def close(self) -> None:
        """Cancel the reads still in flight (a message one was answered with stays pending in
        the group, to be reclaimed)."""
        reading, self._reading = list(self._reading.values()), {}
        for task in reading:
            task.cancel()
        await asyncio.gather(*reading, return_exceptions=True)
