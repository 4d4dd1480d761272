"""The ledger's own RESP connection against a real Redis: the same replies redis-py gives,
requests matched to replies in order, and a dropped connection that fails what was waiting
and is replaced on the next request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from callgate.config import Settings
from callgate.ledger.pipeline import AutoPipeline
from callgate.ledger.wire import BlockingReads, wire_address


@pytest.fixture
async def pipe(redis: aioredis.Redis) -> AsyncIterator[AutoPipeline]:
    """The ledger's pipeline on the test's Redis, closed after the test."""
    pipeline = AutoPipeline(redis)
    try:
        yield pipeline
    finally:
        await pipeline.aclose()


async def _kill_other_clients(redis: aioredis.Redis) -> None:
    await redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    await asyncio.sleep(0.1)  # let the killed side see its connection go


async def test_replies_have_the_shapes_redis_py_gives(
    redis: aioredis.Redis, pipe: AutoPipeline, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def through_redis_py(batch: object) -> list[object]:
        raise AssertionError("a hot command took redis-py's pipeline, and its flush with it")

    monkeypatch.setattr(pipe, "_pipelined", through_redis_py)
    h, lst, missing = (f"{settings.key_prefix}:{n}" for n in ("h", "l", "nothing"))
    await redis.hset(h, mapping={"a": "1", "b": "two"})
    await redis.rpush(lst, "x", "y")
    sha = await redis.script_load(
        "return {1, {KEYS[1], ARGV[1]}, redis.call('HGET', KEYS[1], 'a')}"
    )
    commands = [
        ("hgetall", h),
        ("hgetall", missing),
        ("hget", h, "b"),
        ("hget", h, "zz"),
        ("hmget", h, "a", "zz"),
        ("lrange", lst, 0, -1),
        ("exists", h, missing),
        ("evalsha", sha, 1, h, "arg"),
    ]
    wire = await pipe.send(commands)
    expected = [
        await redis.hgetall(h),
        await redis.hgetall(missing),
        await redis.hget(h, "b"),
        await redis.hget(h, "zz"),
        await redis.hmget(h, ["a", "zz"]),
        await redis.lrange(lst, 0, -1),
        await redis.exists(h, missing),
        await redis.evalsha(sha, 1, h, "arg"),
    ]
    assert wire == expected


async def test_an_empty_request_resolves_at_once_and_the_next_gets_its_own_reply(
    pipe: AutoPipeline, settings: Settings
) -> None:
    key = f"{settings.key_prefix}:n"
    empty, counted = await asyncio.gather(pipe.send([]), pipe.send([("incr", key)]))
    assert empty == [] and counted == [1]
    assert await pipe.send([("incr", key)]) == [2]


async def test_script_errors_come_back_as_redis_py_exceptions_in_place(
    redis: aioredis.Redis, pipe: AutoPipeline, settings: Settings
) -> None:
    key = f"{settings.key_prefix}:k"
    bad_sha = "0" * 40
    failing = await redis.script_load("return redis.error_reply('CGTX op 1 hset: nope')")
    replies = await pipe.send([("evalsha", bad_sha, 0), ("evalsha", failing, 0), ("incr", key)])
    assert isinstance(replies[0], NoScriptError)
    assert isinstance(replies[1], ResponseError) and "CGTX op 1 hset: nope" in str(replies[1])
    assert replies[2] == 1


async def test_a_dropped_connection_is_replaced_on_the_next_request(
    redis: aioredis.Redis, pipe: AutoPipeline, settings: Settings
) -> None:
    key = f"{settings.key_prefix}:n"
    assert await pipe.send([("incr", key)]) == [1]
    await _kill_other_clients(redis)
    assert await pipe.send([("incr", key)]) == [2]


async def test_a_selected_database_is_the_one_written(settings: Settings) -> None:
    other_db = aioredis.Redis.from_url(settings.redis_url.rsplit("/", 1)[0] + "/3")
    pipe = AutoPipeline(other_db)
    key = f"{settings.key_prefix}:db3"
    try:
        assert await pipe.send([("rpush", key, "here")]) == [1]
        assert await other_db.lrange(key, 0, -1) == [b"here"]
        async with aioredis.Redis.from_url(settings.redis_url) as db0:
            assert await db0.exists(key) == 0
    finally:
        await other_db.delete(key)
        await pipe.aclose()
        await other_db.aclose()


async def test_blocking_reads_give_redis_py_shapes_and_fail_fast_when_dropped(
    redis: aioredis.Redis, settings: Settings
) -> None:
    address = wire_address(redis)
    assert address is not None
    reads = BlockingReads(address)
    stream = f"{settings.key_prefix}:s"
    for group in ("wire", "py"):
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    await redis.xadd(stream, {"d": b"one", "e": b"1"})
    await redis.xadd(stream, {"d": b"two"})
    got = await reads.xreadgroup("wire", "c", [stream], 10, 100)
    want = await redis.xreadgroup("py", "c", {stream: ">"}, count=10, block=100)
    assert got == want
    assert await reads.xreadgroup("wire", "c", [stream], 10, 50) == []

    blocked = asyncio.create_task(reads.xreadgroup("wire", "c", [stream], 10, 10_000))
    await asyncio.sleep(0.1)
    await _kill_other_clients(redis)
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(blocked, 2)
    await redis.xadd(stream, {"d": b"three"})
    [(_, [(_, fields)])] = await reads.xreadgroup("wire", "c", [stream], 10, 100)
    assert fields == {b"d": b"three"}
    reads.close()
