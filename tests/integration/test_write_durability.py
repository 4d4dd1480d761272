"""``CALLGATE_WRITE_DURABILITY`` against a real master and a real replica (DESIGN §13).

``replica``: a write goes out only once a replica holds its ``executing`` intent — with the
replica killed, nothing is sent and the call waits, unlost, until one is back; with the replica
asleep when the call is taken, the request waits for it.  ``fsync``: an executor refuses to
start on a Redis that does not fsync every write, or will not say.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from functools import cache
from typing import Any

import aiohttp
import pytest
import redis
from arq.constants import job_key_prefix

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.connect import redis_client
from callgate.envelopes import ExecRequest, encode, new_id
from callgate.errors import RedisUnavailableError
from callgate.jobs import START_RUN, StartJob
from callgate.ops.embedded_redis import EmbeddedRedis, find_redis_server
from callgate.records import CallRecord, Effect, RunRecord
from callgate.services.executor import Executor
from callgate.standins.demo.http import ServiceProcess, launch
from callgate.standins.demo.workshop import BOOKING_URL_SETTING
from callgate.states import CallState, RunState
from callgate.streams.commands import ensure_groups
from callgate.streams.public_queue import enqueue_once
from callgate.streams.service import START_FAILED, Runtime, build_runtime
from callgate.streams.worker import Delivery
from callgate.tools.contract import ToolContext
from tests.conftest import TEST_TOOLS
from tests.integration import durable_tools
from tests.integration.helpers import drain, new_run_id, reset_session
from tests.seed import run_spec, seed

pytestmark = pytest.mark.timeout(60)
GROUP = "executor"
ALICE = {"user": "alice"}
"""Who the runs act for: she may reserve for p-alice (the service is reset for each test)."""
WAIT_MS = 500


@cache
def redis7() -> str:
    """A redis-server of version 7 or later (the venv's own is 6.2; Debian's is 7.0)."""
    for binary in (find_redis_server(), "/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5)
        except OSError:
            continue
        version = out.stdout.split("v=")[1].split()[0] if "v=" in out.stdout else "0"
        if int(version.split(".")[0]) >= 7:
            return binary
    pytest.skip("no redis-server >= 7 installed")


class Redis7(EmbeddedRedis):
    """A private redis-server >= 7 that takes DEBUG SLEEP from loopback (a replica asleep)."""

    def arguments(self) -> list[str]:
        return [
            redis7(), *super().arguments()[1:],
            "--enable-debug-command", "local",
            "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after 5 s
        ]  # fmt: skip


def _info(server: EmbeddedRedis) -> dict[str, Any]:
    with redis.Redis.from_url(server.url, socket_timeout=2) as client:
        return dict(client.info("replication"))


def _until(condition: Any, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def master() -> Iterator[EmbeddedRedis]:
    with Redis7() as server:
        yield server


@pytest.fixture
def replica(master: EmbeddedRedis) -> Iterator[EmbeddedRedis]:
    with Redis7() as server:
        server.follow(master)
        yield server


@pytest.fixture(scope="module")
def booking() -> Iterator[ServiceProcess]:
    with launch("callgate.standins.demo.booking_service") as service:
        yield service


@pytest.fixture
async def http(
    booking: ServiceProcess, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[aiohttp.ClientSession]:
    monkeypatch.setenv(BOOKING_URL_SETTING, booking.url)
    async with reset_session(booking, aiohttp.ClientTimeout(total=5)) as session:
        yield session


def _settings(master: EmbeddedRedis, wire: str) -> Settings:
    return Settings(
        redis_url=master.url,
        key_prefix=f"t{new_id()[:10]}",
        tool_modules=(*TEST_TOOLS, durable_tools.MODULE),
        write_durability="replica",
        durability_wait_ms=WAIT_MS,
        wire=wire,  # type: ignore[arg-type]
    )


@pytest.fixture(params=["hiredis", "redis-py"])
async def executor(
    master: EmbeddedRedis, request: pytest.FixtureRequest
) -> AsyncIterator[Executor]:
    runtime = build_runtime("executor", _settings(master, request.param))
    yield Executor(runtime)
    await runtime.close()


async def _ordered_write(rt: Runtime, tool: str, effect: Effect) -> ExecRequest:
    """An allowed write, seeded, and its exec message on the stream."""
    run_id = f"run-{new_id()}"
    run = RunRecord(
        run_id=run_id, status=RunState.EXECUTING, api="openai-chat", model="m", input="i",
        turn=1, identity=ALICE, allowed_tools=[tool],
    )  # fmt: skip
    call = CallRecord(
        run_id=run_id, call_id="t1.0", turn=1, index=0, provider_call_id="call_1", tool=tool,
        tool_version="1", arguments={"event_id": "ws-200", "participant_id": "p-alice"},
        raw_arguments="{}", effect=effect, state=CallState.ALLOWED, decision="allowed",
    )  # fmt: skip
    await seed(rt.ledger, run, [call])
    message = ExecRequest(run_id=run_id, turn=1, call_id=call.call_id)
    stream = rt.keys.run_stream("exec", run_id)
    await ensure_groups(rt.redis, GROUP, [stream])
    await rt.redis.xadd(stream, {"d": encode(message)})
    return message


async def _delivery(rt: Runtime, message: ExecRequest, count: int) -> Delivery:
    """The message as the executor group gets it (read, or reclaimed after a failure)."""
    stream = rt.keys.run_stream("exec", message.run_id)
    if count == 1:
        [[_, [(entry_id, _)]]] = await rt.redis.xreadgroup(GROUP, "c", {stream: ">"}, count=1)
    else:
        [[entry_id, _]] = await rt.redis.xrange(stream)
    return Delivery(stream, entry_id.decode(), count, GROUP)


async def _sent(http: aiohttp.ClientSession, booking: ServiceProcess) -> int:
    """Reservation requests the booking service received: the tool's own counter."""
    async with http.get(f"{booking.url}/_stats") as resp:
        stats: dict[str, Any] = await resp.json()
    return int(stats["reserve"]["requests"])


@pytest.mark.parametrize(
    ("tool", "effect"),
    [("reserve_unapproved", Effect.WRITE), ("hold_seat", Effect.IDEMPOTENT_WRITE)],
)
async def test_without_a_replica_a_write_is_never_sent_and_goes_out_once_one_is_back(
    executor: Executor,
    master: EmbeddedRedis,
    replica: EmbeddedRedis,
    booking: ServiceProcess,
    http: aiohttp.ClientSession,
    tool: str,
    effect: Effect,
) -> None:
    rt = executor.rt
    message = await _ordered_write(rt, tool, effect)
    replica.stop(kill=True)
    _until(lambda: _info(master).get("connected_slaves") == 0, "replica gone")

    started = time.monotonic()
    with pytest.raises(RedisUnavailableError, match="no replica confirmed"):
        await executor.handle(message, await _delivery(rt, message, 1))
    assert time.monotonic() - started < 3
    assert await _sent(http, booking) == 0
    call = await rt.ledger.get_call(message.run_id, message.call_id)
    assert call is not None and call.state == CallState.ALLOWED  # taken back, not orphaned
    stream = rt.keys.run_stream("exec", message.run_id)
    assert (await rt.redis.xpending(stream, GROUP))["pending"] == 1  # left for redelivery
    events = [e.type for e in await rt.ledger.events(message.run_id)]
    assert "call.unsent" in events

    replica.start()
    await asyncio.to_thread(replica.follow, master)
    delivery = await _delivery(rt, message, 2)
    await executor.handle(message, delivery)

    call = await rt.ledger.get_call(message.run_id, message.call_id)
    assert call is not None and call.state == CallState.SUCCEEDED
    assert await _sent(http, booking) == 1
    assert delivery.settled


async def test_a_write_taken_back_after_its_run_was_cancelled_ends_not_applied_and_never_goes_out(
    executor: Executor,
    master: EmbeddedRedis,
    replica: EmbeddedRedis,
    booking: ServiceProcess,
    http: aiohttp.ClientSession,
) -> None:
    """A cancel leaves a call in flight to settle truly; if its take is then taken back (no
    replica), going back to ``allowed`` in a cancelled run would leave it there for good: it
    ends ``failed`` (not applied, which is the truth), and redelivery sends nothing."""
    rt = executor.rt
    message = await _ordered_write(rt, "reserve_unapproved", Effect.WRITE)
    replica.stop(kill=True)
    _until(lambda: _info(master).get("connected_slaves") == 0, "replica gone")

    async def cancel_once_taken() -> None:
        """What a cancel does to a run whose call is executing: the run ends, the call is
        left to settle (`ControlSteps.cancel_run`)."""
        while (call := await rt.ledger.get_call(message.run_id, message.call_id)) is None or (
            call.state != CallState.EXECUTING
        ):
            await asyncio.sleep(0.005)
        await rt.redis.hset(rt.keys.run(message.run_id), "status", RunState.CANCELLED)

    cancelling = asyncio.create_task(cancel_once_taken())
    with pytest.raises(RedisUnavailableError, match="no replica confirmed"):
        await executor.handle(message, await _delivery(rt, message, 1))
    await asyncio.wait_for(cancelling, 1)
    call = await rt.ledger.get_call(message.run_id, message.call_id)
    assert call is not None and call.state == CallState.FAILED, call

    replica.start()
    await asyncio.to_thread(replica.follow, master)
    await executor.handle(message, await _delivery(rt, message, 2))
    assert await _sent(http, booking) == 0


async def test_with_a_replica_asleep_the_request_waits_until_it_holds_the_intent(
    executor: Executor,
    master: EmbeddedRedis,
    replica: EmbeddedRedis,
    booking: ServiceProcess,
    http: aiohttp.ClientSession,
) -> None:
    rt = executor.rt
    message = await _ordered_write(rt, "reserve_unapproved", Effect.WRITE)
    key = rt.keys.call(message.run_id, message.call_id)
    seen: list[bytes | None] = []

    def on_replica(ctx: ToolContext) -> None:
        """What the replica answers when the request goes out (nothing, if it is asleep)."""
        with redis.Redis.from_url(replica.url, socket_timeout=0.1) as client:
            try:
                seen.append(client.hget(key, "state"))
            except redis.TimeoutError:
                seen.append(None)

    # The replica sleeps through the take: a request sent without waiting finds it silent.
    sleeper = redis.Redis.from_url(replica.url, socket_timeout=5)
    asleep = threading.Thread(target=sleeper.execute_command, args=("DEBUG", "SLEEP", "0.2"))
    asleep.start()
    await asyncio.sleep(0.05)
    durable_tools.AT_SEND.append(on_replica)
    try:
        await executor.handle(message, await _delivery(rt, message, 1))
    finally:
        durable_tools.AT_SEND.remove(on_replica)
        await asyncio.to_thread(asleep.join, 5)
        sleeper.close()

    assert seen == [b"executing"]
    assert await _sent(http, booking) == 1
    call = await rt.ledger.get_call(message.run_id, message.call_id)
    assert call is not None and call.state == CallState.SUCCEEDED


JOB = StartJob(spec={"input": "hi"}, token="t")
"""A job to enqueue: what it holds does not matter to the enqueue."""


async def test_without_a_replica_a_submission_is_refused_to_be_sent_again(
    master: EmbeddedRedis,
) -> None:
    """A failover could lose a job no replica holds: its submitter is told to submit again
    (harmless under the same run id), never that it is queued."""
    client = redis_client(master.url)
    try:
        with pytest.raises(RedisUnavailableError, match="submit it again"):
            await enqueue_once(client, _settings(master, "hiredis"), START_RUN, JOB, "j-alone")
    finally:
        await client.aclose()


async def test_with_a_replica_a_submission_returns_once_the_replica_holds_it(
    master: EmbeddedRedis, replica: EmbeddedRedis
) -> None:
    settings = _settings(master, "hiredis")
    client = redis_client(master.url)
    try:
        assert await enqueue_once(client, settings, START_RUN, JOB, "j-held") is True
    finally:
        await client.aclose()
    with redis.Redis.from_url(replica.url) as on_replica:
        assert on_replica.exists(job_key_prefix + "j-held") == 1


async def test_a_start_job_the_master_ran_alone_is_not_taken_for_a_safe_submission(
    master: EmbeddedRedis, replica: EmbeddedRedis
) -> None:
    """With the replica frozen, the ingress runs a start job on the master alone: the master
    keeps its result and the run, the replica neither, so a failover now loses the run.  A
    second submission must not read the kept result as "queued": it is told to submit again
    until a replica holds the job, which then finds its run (one run, created once)."""
    settings = _settings(master, "hiredis")
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        async with CallgateClient(settings) as client:
            run_id = new_run_id()
            with pytest.raises(RedisUnavailableError, match="submit it again"):
                await client.submit(run_spec(run_id))
            assert await drain(settings) == (1, 0)
            with pytest.raises(RedisUnavailableError, match="submit it again"):
                await client.submit(run_spec(run_id))
            os.kill(replica.process.pid, signal.SIGCONT)
            assert await client.submit(run_spec(run_id)) == run_id
            assert await drain(settings) == (1, 0)
            created = [e for e in await client.events(run_id) if e.type == "run.created"]
            assert len(created) == 1
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)


def _start_executor(server: EmbeddedRedis, url: str | None = None, **env: str) -> list[str]:
    """The lines an executor started against ``server`` with ``env`` prints; it must
    have exited by itself (``--burst``: drain and return), with its exit code checked."""
    done = subprocess.run(
        [sys.executable, "-m", "callgate.services.executor", "--burst"],
        env={**_base_env(), "REDIS_URL": url or server.url, **env},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return [str(done.returncode), *(done.stdout + done.stderr).strip().splitlines()]


def _base_env() -> dict[str, str]:
    return {**os.environ, "CALLGATE_KEY_PREFIX": f"t{new_id()[:10]}", "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize(
    ("appendonly", "appendfsync"),
    [(True, "everysec"), (False, "always")],
    ids=["everysec", "no-aof"],
)
def test_fsync_refuses_to_start_on_a_redis_that_does_not_fsync_every_write(
    appendonly: bool, appendfsync: str
) -> None:
    with Redis7(appendonly=appendonly, appendfsync=appendfsync) as server:
        code, *lines = _start_executor(server, CALLGATE_WRITE_DURABILITY="fsync")
    assert code == str(START_FAILED)
    assert len(lines) == 1 and "appendfsync always" in lines[0], lines
    assert f"appendfsync {appendfsync}" in lines[0]


def test_fsync_refuses_to_start_when_its_user_may_not_read_the_config() -> None:
    with Redis7(appendonly=True, appendfsync="always") as server:
        with redis.Redis.from_url(server.url) as admin:
            admin.acl_setuser("limited", enabled=True, passwords=["+pw"], keys=["*"],
                              commands=["+@all", "-config"])  # fmt: skip
        url = server.url_for("limited", "pw")
        code, *lines = _start_executor(server, url, CALLGATE_WRITE_DURABILITY="fsync")
    assert code == str(START_FAILED)
    assert len(lines) == 1 and "grant it +config|get" in lines[0], lines


def test_fsync_starts_on_a_redis_that_fsyncs_every_write() -> None:
    with Redis7(appendonly=True, appendfsync="always") as server:
        code, *_ = _start_executor(server, CALLGATE_WRITE_DURABILITY="fsync")
    assert code == "0"


def test_a_durability_that_does_not_exist_is_one_line_at_start() -> None:
    with Redis7() as server:
        code, *lines = _start_executor(server, CALLGATE_WRITE_DURABILITY="sometimes")
    assert code == str(START_FAILED)
    assert len(lines) == 1 and "bad setting: write_durability" in lines[0], lines
