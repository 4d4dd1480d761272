"""`AutoPipeline` against a real Redis: what concurrent callers issue in one event-loop turn
goes in one round trip, and each caller still gets its own reply or its own error."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.ledger.pipeline import AutoPipeline
from callgate.ledger.wire import Wire, WireAddress
from callgate.ops.embedded_redis import free_port


async def test_concurrent_requests_share_one_round_trip(
    redis: aioredis.Redis, settings: Settings
) -> None:
    pipe = AutoPipeline(redis)
    key = f"{settings.key_prefix}:n"

    async def incr() -> list[object]:
        return await pipe.send([("incr", key)])

    replies = await asyncio.gather(*(incr() for _ in range(50)))
    assert sorted(r[0] for r in replies) == list(range(1, 51))  # type: ignore[type-var]
    assert pipe.flushes == 1


async def test_a_failing_command_fails_only_its_own_reply(
    redis: aioredis.Redis, settings: Settings
) -> None:
    pipe = AutoPipeline(redis)
    text, number = f"{settings.key_prefix}:text", f"{settings.key_prefix}:number"
    await redis.set(text, "not a number")
    bad, good = await asyncio.gather(
        pipe.send([("incr", text), ("get", text)]), pipe.send([("incr", number)])
    )
    assert isinstance(bad[0], ResponseError) and bad[1] == b"not a number"
    assert good == [1]
    assert pipe.flushes == 1


async def test_commands_of_one_caller_keep_their_order(
    redis: aioredis.Redis, settings: Settings
) -> None:
    pipe = AutoPipeline(redis)
    key = f"{settings.key_prefix}:list"
    first = pipe.send([("rpush", key, "a"), ("rpush", key, "b")])
    second = pipe.send([("lrange", key, 0, -1)])
    assert await first == [1, 2]
    assert await second == [[b"a", b"b"]]


async def test_a_lost_connection_fails_every_request_of_the_flush() -> None:
    dead = aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)
    pipe = AutoPipeline(dead)
    try:
        results = await asyncio.gather(
            pipe.send([("get", "a")]), pipe.send([("get", "b")]), return_exceptions=True
        )
        assert all(isinstance(r, RedisConnectionError | OSError) for r in results), results
    finally:
        await dead.aclose()


async def test_a_cancelled_caller_does_not_disturb_the_others(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """Like any command already handed to Redis, a queued one still runs if its caller stops
    waiting; the callers after it get their own replies."""
    pipe = AutoPipeline(redis)
    key = f"{settings.key_prefix}:c"
    gone = pipe.send([("incr", key)])
    kept = pipe.send([("incr", key)])
    gone.cancel()
    assert await kept == [2]
    assert await redis.get(key) == b"2"
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_a_flush_while_the_connection_opens_keeps_the_new_connection(
    redis: aioredis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second flush that found no connection yet must neither close the one just opened,
    with the first flush's request in flight on it (that request failed with 'lost the
    connection to Redis: closed'), nor open another."""
    pipe = AutoPipeline(redis)
    key = f"{settings.key_prefix}:n"
    connect = Wire.connect
    opened: list[Wire] = []
    second: list[asyncio.Future[list[object]]] = []

    async def connect_then_queue(address: WireAddress) -> Wire:
        wire = await connect(address)
        opened.append(wire)
        if not second:  # flushed before the first caller resumes
            second.append(pipe.send([("incr", key)]))
        return wire

    monkeypatch.setattr(Wire, "connect", staticmethod(connect_then_queue))
    first = await pipe.send([("incr", key)])
    assert sorted([first[0], (await second[0])[0]]) == [1, 2]
    assert len(opened) == 1
    await pipe.aclose()
