"""The consumer-group loop against a real Redis and real worker processes.

Every test waits on observable Redis state (counters the handler writes, the PEL, the
dead-letter stream) or on burst mode returning, not on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.envelopes import Envelope, TurnRequest, encode
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ledger.tx import Tx
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.streams.worker import DeadLetter, Delivery, Handler, StreamWorker
from tests.integration.stream_worker_proc import ledger_handler, stream_name, tkey

ROOT = Path(__file__).resolve().parents[2]
GROUP = "workers"

pytestmark = pytest.mark.timeout(30)


async def send(redis: aioredis.Redis, settings: Settings, behaviour: str) -> str:
    envelope = TurnRequest(run_id="run-1", turn=1, reason=behaviour)
    await redis.xadd(stream_name(settings), {"d": encode(envelope)})
    return envelope.msg_id


async def counter(redis: aioredis.Redis, settings: Settings, what: str, msg_id: str) -> int:
    return int(await redis.get(tkey(settings, what, msg_id)) or 0)


async def counts(redis: aioredis.Redis, settings: Settings, msg_id: str) -> list[int]:
    rows: list[bytes] = await redis.lrange(tkey(settings, "counts", msg_id), 0, -1)  # type: ignore[misc]
    return [int(c) for c in rows]


async def pending(redis: aioredis.Redis, settings: Settings) -> int:
    return int((await redis.xpending(stream_name(settings), GROUP))["pending"])


async def wait_until(check: Callable[[], Awaitable[bool]], timeout_s: float = 8.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def worker(
    redis: aioredis.Redis, settings: Settings, handler: Handler | None = None, **kwargs: object
) -> StreamWorker:
    return StreamWorker(
        redis,
        settings,
        group=GROUP,
        streams=[stream_name(settings)],
        handler=handler or ledger_handler(redis, settings, rescuer=True),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def spawn(subprocess_env: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``stream_worker_proc`` as a real process; kill leftovers at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(consumer: str, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.stream_worker_proc",
                "--group",
                GROUP,
                "--consumer",
                consumer,
            ],
            cwd=ROOT,
            env={**subprocess_env, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        assert time.monotonic() < deadline, "worker process did not exit"
        await asyncio.sleep(0.02)
    return proc.returncode


# Crash recovery ------------------------------------------------------------------------


async def test_sigkill_before_effect_is_reclaimed_and_applied_once(
    redis: aioredis.Redis, settings: Settings, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    proc = spawn("doomed")
    msg_id = await send(redis, settings, "gate")
    await wait_until(lambda: _gt0(redis, settings, msg_id))
    os.kill(proc.pid, signal.SIGKILL)
    assert await wait_exit(proc) == -signal.SIGKILL
    assert await counter(redis, settings, "effects", msg_id) == 0
    assert await pending(redis, settings) == 1  # read but never acked

    rescuer = worker(redis, settings)
    assert await rescuer.run_burst() == 1
    assert await counter(redis, settings, "effects", msg_id) == 1
    assert await counts(redis, settings, msg_id) == [1, 2]
    assert rescuer.stats.reclaimed == 1
    assert await pending(redis, settings) == 0


async def _gt0(redis: aioredis.Redis, settings: Settings, msg_id: str) -> bool:
    return await counter(redis, settings, "deliveries", msg_id) > 0


async def test_sigkill_after_effect_before_ack_redelivery_is_a_noop(
    redis: aioredis.Redis, settings: Settings, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    proc = spawn("doomed", CALLGATE_CRASH_AT="streams_test.after_effect")
    msg_id = await send(redis, settings, "crash_after_effect")
    assert await wait_exit(proc) == -signal.SIGKILL
    assert b"crash point streams_test.after_effect" in (proc.stderr.read() if proc.stderr else b"")
    assert await counter(redis, settings, "effects", msg_id) == 1
    assert await pending(redis, settings) == 1

    rescuer = worker(redis, settings)
    assert await rescuer.run_burst() == 1
    assert await counts(redis, settings, msg_id) == [1, 2]  # it was redelivered …
    assert await counter(redis, settings, "noop", msg_id) == 1  # … and the ledger said "done"
    assert await counter(redis, settings, "effects", msg_id) == 1
    assert await pending(redis, settings) == 0


# Poison messages -----------------------------------------------------------------------


async def test_poison_messages_are_dead_lettered_while_good_ones_flow(
    redis: aioredis.Redis, settings: Settings
) -> None:
    settings = settings.model_copy(update={"max_deliveries": 3})
    stream = stream_name(settings)
    dead_stream = Keys(settings.key_prefix).dead_letter_for(stream)
    not_json = await redis.xadd(stream, {"d": b"{not json"})
    invalid = await redis.xadd(stream, {"d": orjson.dumps({"kind": "turn_request", "turn": -1})})
    no_field = await redis.xadd(stream, {"other": b"x"})
    failing = await send(redis, settings, "fail")
    fatal = await send(redis, settings, "fatal")
    good = await send(redis, settings, "ok")

    events: list[str] = []
    letters: list[DeadLetter] = []
    inner = ledger_handler(redis, settings)

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        await inner(envelope, delivery)
        events.append(f"handled {envelope.msg_id}")

    async def on_dead_letter(letter: DeadLetter) -> None:
        letters.append(letter)
        events.append(f"dead {letter.message_id}")
        raise RuntimeError("a failing callback is logged, not raised")

    w = worker(redis, settings, handler, on_dead_letter=on_dead_letter)
    assert await w.run_burst() == 6

    entries = await redis.xrange(dead_stream)
    by_id = {fields[b"message_id"].decode(): fields for _, fields in entries}
    assert len(entries) == 5
    assert b"JSON" in by_id[not_json.decode()][b"reason"]
    assert by_id[not_json.decode()][b"d"] == b"{not json"
    assert by_id[invalid.decode()][b"reason"].startswith(b"invalid envelope")
    assert b"turn" in by_id[invalid.decode()][b"reason"]
    assert by_id[no_field.decode()][b"reason"] == b"message has no 'd' field"
    assert all(f[b"stream"] == stream.encode() for f in by_id.values())

    fail_letter = next(x for x in letters if x.envelope and x.envelope.msg_id == failing)
    assert fail_letter.delivery_count == 3
    assert by_id[fail_letter.message_id][b"delivery_count"] == b"3"
    assert b"handler always fails" in by_id[fail_letter.message_id][b"reason"]
    assert await counts(redis, settings, failing) == [1, 2, 3]  # exactly max_deliveries

    fatal_letter = next(x for x in letters if x.envelope and x.envelope.msg_id == fatal)
    assert fatal_letter.delivery_count == 1
    assert fatal_letter.reason == "NotFoundError: run does not exist"
    assert await counts(redis, settings, fatal) == [1]

    assert await counter(redis, settings, "effects", good) == 1
    # The good message did not wait for the failing one's retries.
    assert events.index(f"handled {good}") < events.index(f"dead {fail_letter.message_id}")
    assert await pending(redis, settings) == 0


# Heartbeat -----------------------------------------------------------------------------


async def test_heartbeat_keeps_a_slow_handler_from_being_stolen(
    redis: aioredis.Redis, settings: Settings
) -> None:
    assert settings.claim_idle_ms == 300
    msg_id = await send(redis, settings, "sleep:1.2")  # four times claim_idle_ms
    seen_in_redis: list[int] = []

    def slow(client: aioredis.Redis) -> Handler:
        inner = ledger_handler(client, settings)

        async def handler(envelope: Envelope, delivery: Delivery) -> None:
            await inner(envelope, delivery)
            # Still pending (not acked yet): nobody re-claimed it meanwhile, not even us.
            mid = delivery.message_id
            rows = await client.xpending_range(delivery.stream, GROUP, mid, mid, 1)
            seen_in_redis.append(int(rows[0]["times_delivered"]))

        return handler

    other = aioredis.Redis.from_url(settings.redis_url)
    try:
        a = worker(redis, settings, slow(redis), consumer="a")
        b = worker(other, settings, slow(other), consumer="b")
        settled = await asyncio.gather(a.run_burst(), b.run_burst())
    finally:
        await other.aclose()
    assert sorted(settled) == [0, 1]
    assert await counts(redis, settings, msg_id) == [1]
    assert seen_in_redis == [1]
    assert await counter(redis, settings, "effects", msg_id) == 1
    assert a.stats.reclaimed == b.stats.reclaimed == 0


async def test_heartbeat_does_not_steal_back_a_message_another_consumer_claimed(
    redis: aioredis.Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    msg_id = await send(redis, settings, "gate")
    w = worker(redis, settings, ledger_handler(redis, settings), consumer="slow")
    running = asyncio.create_task(w.run())
    try:
        await wait_until(lambda: _gt0(redis, settings, msg_id))
        entry_id = (await redis.xrange(stream_name(settings)))[0][0]
        await redis.xclaim(stream_name(settings), GROUP, "thief", 0, [entry_id], justid=True)

        async def lost_logged() -> bool:
            return any("another consumer reclaimed" in r.getMessage() for r in caplog.records)

        await wait_until(lost_logged, timeout_s=settings.claim_idle_ms / 1000)
        rows = await redis.xpending_range(stream_name(settings), GROUP, "-", "+", 10)
        assert [r["consumer"] for r in rows] == [b"thief"]
    finally:
        await redis.set(tkey(settings, "gate", msg_id), 1)
        await w.shutdown()
        await running


async def ghost_read(redis: aioredis.Redis, settings: Settings, consumer: str) -> bytes:
    """Deliver the next message to a consumer that then "dies" (never acks)."""
    stream = stream_name(settings)
    await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    reply = await redis.xreadgroup(GROUP, consumer, {stream: ">"}, count=1)
    entry_id: bytes = reply[0][1][0][0]
    return entry_id


async def test_message_that_keeps_killing_consumers_is_dead_lettered_unrun(
    redis: aioredis.Redis, settings: Settings
) -> None:
    settings = settings.model_copy(update={"max_deliveries": 3})
    msg_id = await send(redis, settings, "ok")
    entry_id = await ghost_read(redis, settings, "ghost-1")
    for ghost in ("ghost-2", "ghost-3"):  # two more consumers took it and died
        await redis.xclaim(stream_name(settings), GROUP, ghost, 0, [entry_id])
    letters: list[DeadLetter] = []

    async def on_dead_letter(letter: DeadLetter) -> None:
        letters.append(letter)

    assert await worker(redis, settings, on_dead_letter=on_dead_letter).run_burst() == 1
    assert await counts(redis, settings, msg_id) == []  # not run a fourth time
    [letter] = letters
    assert letter.delivery_count == 3
    assert letter.envelope is not None and letter.envelope.run_id == "run-1"
    assert letter.reason.startswith("not settled after 3 deliveries")
    assert await pending(redis, settings) == 0


async def test_pending_entry_deleted_from_the_stream_is_recorded(
    redis: aioredis.Redis, settings: Settings
) -> None:
    await send(redis, settings, "ok")
    entry_id = await ghost_read(redis, settings, "ghost")
    await redis.xdel(stream_name(settings), entry_id)
    assert await worker(redis, settings).run_burst() == 1
    dead_stream = Keys(settings.key_prefix).dead_letter_for(stream_name(settings))
    [(_, fields)] = await redis.xrange(dead_stream)
    assert fields[b"message_id"] == entry_id
    assert fields[b"reason"] == b"entry deleted from the stream before it was settled"
    assert await pending(redis, settings) == 0


# Graceful stop -------------------------------------------------------------------------


async def test_sigterm_finishes_in_flight_and_leaves_the_unfinished_pending(
    redis: aioredis.Redis, settings: Settings, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    proc = spawn("stopping", CALLGATE_SHUTDOWN_GRACE_S="1.0")
    quick = await send(redis, settings, "sleep:0.4")
    stuck = await send(redis, settings, "block")

    async def both_started() -> bool:
        return await _gt0(redis, settings, quick) and await _gt0(redis, settings, stuck)

    await wait_until(both_started)
    sent_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert await wait_exit(proc) == 0
    took_s = time.monotonic() - sent_at
    assert 0.9 < took_s < 3.0  # waited out the grace for the stuck one, then stopped

    assert await counter(redis, settings, "effects", quick) == 1
    assert await counter(redis, settings, "effects", stuck) == 0
    rows = await redis.xpending_range(stream_name(settings), GROUP, "-", "+", 10)
    assert [r["consumer"] for r in rows] == [b"stopping"]  # only the stuck one, unacked

    rescuer = worker(redis, settings)
    assert await rescuer.run_burst() == 1
    assert await counter(redis, settings, "effects", stuck) == 1
    assert await counts(redis, settings, stuck) == [1, 2]
    assert await pending(redis, settings) == 0


async def test_shutdown_is_idempotent_and_cancels_without_acking(
    redis: aioredis.Redis, settings: Settings
) -> None:
    settings = settings.model_copy(update={"shutdown_grace_s": 0.2})
    msg_id = await send(redis, settings, "block")
    w = worker(redis, settings, ledger_handler(redis, settings))
    running = asyncio.create_task(w.run())
    await wait_until(lambda: _gt0(redis, settings, msg_id))
    await asyncio.gather(w.shutdown(), w.shutdown())
    await asyncio.wait_for(running, 2)
    await w.shutdown()
    assert await pending(redis, settings) == 1
    assert await counter(redis, settings, "effects", msg_id) == 0


# Throughput shape ----------------------------------------------------------------------


async def test_concurrency_is_bounded_by_the_free_slots(
    redis: aioredis.Redis, settings: Settings
) -> None:
    settings = settings.model_copy(update={"concurrency": 4})
    for _ in range(20):
        await send(redis, settings, "sleep:0.1")
    running = peak = 0

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.1)
        finally:
            running -= 1

    assert await worker(redis, settings, handler).run_burst() == 20
    assert peak == 4


async def test_acks_of_messages_finishing_together_share_one_round_trip(
    redis: aioredis.Redis, settings: Settings
) -> None:
    for _ in range(20):
        await send(redis, settings, "ok")
    release = asyncio.Event()
    started = 0

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        nonlocal started
        started += 1
        if started == 20:
            release.set()
        await release.wait()

    async def xack_calls() -> int:
        stats = await redis.info("commandstats")
        return int(stats.get("cmdstat_xack", {}).get("calls", 0))

    before = await xack_calls()
    w = worker(redis, settings, handler)
    assert await w.run_burst() == 20
    assert await xack_calls() - before == 1  # measured on the server
    assert w.stats.ack_round_trips == 1
    assert await pending(redis, settings) == 0


async def test_a_step_that_carries_the_ack_settles_its_message_with_no_ack_round_trip(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """`Delivery.ack_with`: the XACK is written with the effects; a step whose guard fails
    writes neither, and the runner acks that message itself."""
    for reason in ("write", "write", "stale"):
        await send(redis, settings, reason)
    ledger = Ledger(redis, Keys(settings.key_prefix), settings)
    marker = f"{Keys(settings.key_prefix).tag(0)}:marker"

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        assert isinstance(envelope, TurnRequest)
        tx = Tx().rpush(marker, envelope.msg_id)
        if envelope.reason == "stale":
            tx.expect(marker + ":absent", "state", "never")
        applied = (await ledger.apply(delivery.ack_with(tx))).ok
        assert applied == (envelope.reason != "stale")
        still_pending = await redis.xpending_range(
            delivery.stream, GROUP, delivery.message_id, delivery.message_id, 1
        )
        settled_by_step.append(not still_pending)

    settled_by_step: list[bool] = []
    w = worker(redis, settings, handler)
    assert await w.run_burst() == 3
    assert sorted(settled_by_step) == [False, True, True]
    assert w.stats.ack_round_trips == 1  # the stale one only
    assert await pending(redis, settings) == 0
    assert await redis.llen(marker) == 2  # type: ignore[misc]
    await ledger.aclose()


async def test_burst_returns_once_everything_is_handled(
    redis: aioredis.Redis, settings: Settings
) -> None:
    ids = [await send(redis, settings, "ok") for _ in range(10)]  # before the group exists
    w = worker(redis, settings)
    started = time.monotonic()
    assert await w.run_burst() == 10
    assert time.monotonic() - started < 2.0
    assert [await counter(redis, settings, "effects", i) for i in ids] == [1] * 10
    assert await pending(redis, settings) == 0
    assert await w.run_burst() == 0  # reusable, and an empty drain returns at once


# Redis restarts ------------------------------------------------------------------------


@pytest.fixture
async def own_redis(settings: Settings) -> AsyncIterator[tuple[EmbeddedRedis, Settings]]:
    with EmbeddedRedis() as server:
        yield server, settings.model_copy(update={"redis_url": server.url})


async def test_worker_survives_a_redis_restart(own_redis: tuple[EmbeddedRedis, Settings]) -> None:
    server, settings = own_redis
    client = aioredis.Redis.from_url(settings.redis_url)
    w = worker(client, settings)
    running = asyncio.create_task(w.run())
    try:
        first = await send(client, settings, "ok")
        await wait_until(lambda: _effect(client, settings, first))
        await asyncio.to_thread(server.restart)  # no persistence: stream and group are gone
        second = await send(client, settings, "ok")
        await wait_until(lambda: _effect(client, settings, second))
        assert not running.done()
    finally:
        await w.shutdown()
        await running
        await client.aclose()


async def _effect(redis: aioredis.Redis, settings: Settings, msg_id: str) -> bool:
    return await counter(redis, settings, "effects", msg_id) == 1
