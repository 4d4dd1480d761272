"""Trimming settled stream entries against a real Redis: only what every group has acked goes;
a message in flight (also a dead consumer's) and one still unread always stay."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.envelopes import TurnRequest, encode
from callgate.streams.commands import trim_settled
from callgate.streams.worker import StreamWorker


async def _fill(redis: aioredis.Redis, stream: str, count: int) -> list[bytes]:
    return [await redis.xadd(stream, {"d": b"x" * 100}) for _ in range(count)]


async def _ids(redis: aioredis.Redis, stream: str) -> list[bytes]:
    return [entry_id for entry_id, _ in await redis.xrange(stream)]


async def test_only_entries_every_group_settled_are_trimmed(
    redis: aioredis.Redis, settings: Settings
) -> None:
    stream = f"{settings.key_prefix}:s"
    ids = await _fill(redis, stream, 1000)
    for group in ("a", "b"):
        await redis.xgroup_create(stream, group, id="0")
    # Group a read everything and acked all but entry 400 (held by a consumer that died);
    # group b read 700 entries and acked them all; 300 are unread by b.
    await redis.xreadgroup("a", "dead", {stream: ">"}, count=1000)
    await redis.xack(stream, "a", *[i for n, i in enumerate(ids) if n != 400])
    await redis.xreadgroup("b", "live", {stream: ">"}, count=700)
    await redis.xack(stream, "b", *ids[:700])

    removed = await trim_settled(redis, stream)

    left = await _ids(redis, stream)
    assert 0 < removed <= 400 and len(left) == 1000 - removed
    assert ids[400] in left and left[-300:] == ids[700:]  # in flight and unread stay
    reclaimed = await redis.xautoclaim(stream, "a", "rescuer", 0, start_id="0-0", count=10)
    assert [entry_id for entry_id, _ in reclaimed[1]] == [ids[400]]  # still whole
    assert reclaimed[2] == []  # nothing reported deleted


async def test_a_stream_nobody_reads_yet_is_left_alone(
    redis: aioredis.Redis, settings: Settings
) -> None:
    stream = f"{settings.key_prefix}:unread"
    await _fill(redis, stream, 300)
    assert await trim_settled(redis, stream) == 0
    await redis.xgroup_create(stream, "late", id="0")
    assert await trim_settled(redis, stream) == 0  # a new group has read nothing yet
    assert await redis.xlen(stream) == 300


async def test_a_worker_trims_what_it_has_handled(
    redis: aioredis.Redis, settings: Settings
) -> None:
    fast = settings.model_copy(update={"stream_trim_s": 0.05})
    stream = f"{settings.key_prefix}:work"
    for turn in range(500):
        await redis.xadd(stream, {"d": encode(TurnRequest(run_id="r", turn=turn))})

    async def handler(envelope: object, delivery: object) -> None:
        return None

    worker = StreamWorker(redis, fast, group="g", streams=[stream], handler=handler)
    task = asyncio.create_task(worker.run())
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while await redis.xlen(stream) >= 500 - 100 or worker.stats.handled < 500:
            assert asyncio.get_running_loop().time() < deadline, "never trimmed"
            await asyncio.sleep(0.05)
    finally:
        await worker.shutdown()
        await task
    assert (await redis.xpending(stream, "g"))["pending"] == 0
