"""A master failover under Redis Sentinel, with real processes (DESIGN §13, issue 28).

A client made from a ``redis+sentinel://`` URL finds the master through the sentinels and,
after the master is SIGKILLed and a replica promoted, reads what was replicated and writes to
the new master.  Then a whole deployment — every worker kind, the booking service, the scripted
model — runs writes through the same kill with ``CALLGATE_WRITE_DURABILITY=replica``: every run
completes, and the booking service received each write's request exactly once.

The deployment runs two replicas: with ``replica`` durability a write goes out only once a
replica holds its intent, and with one replica the promoted master would have none left, so
every write after the failover would wait, unsent, until the old master came back as a replica.
With two, the sentinels repoint the other replica at the new master and writes resume.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
import redis
from redis.exceptions import RedisError

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.connect import redis_client
from callgate.ledger.wire import wire_address
from callgate.ops.chaos.facts import http_json
from callgate.ops.embedded_redis import EmbeddedRedis, redis_answers
from callgate.ops.embedded_sentinel import EmbeddedSentinel
from callgate.ops.system import LocalSystem, SystemSpec
from tests.integration import durable_tools

pytestmark = pytest.mark.timeout(90)
T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
SCENARIO = "failover-reserve"
RUNS, KILL_AFTER = 24, 12
SUBMIT_EVERY_S = 0.1
SETTLE_S = 45.0


@pytest.fixture
def sentinel() -> Iterator[EmbeddedSentinel]:
    with EmbeddedSentinel(replicas=2) as deployment:
        yield deployment


async def _eventually(work: Callable[[], Awaitable[T]], timeout_s: float = 20.0) -> T:
    """``work``'s result once Redis answers again: what a caller's retry does in a failover."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await work()
        except (RedisError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def _replicate(node_url: str, replicas: int) -> None:
    """Every write the master holds so far is on ``replicas`` replicas (replication is in
    order, so one write of ours confirmed by WAIT confirms all before it)."""
    with redis.Redis.from_url(node_url, socket_timeout=5) as direct:
        direct.set("failover:fence", "1")
        assert direct.wait(replicas, 3000) >= replicas


async def test_a_sentinel_client_follows_the_master_through_a_failover(
    sentinel: EmbeddedSentinel,
) -> None:
    client = redis_client(sentinel.url)
    try:
        assert wire_address(client) is None  # the hiredis fast path is off under Sentinel
        assert redis_answers(sentinel.url)  # `callgate up` reuses a Redis named so
        await client.set("failover:before", "kept")
        old = sentinel.master()
        _replicate(old.url, 2)
        old.stop(kill=True)
        new = sentinel.wait_for_failover(old)
        assert new is not old
        assert await _eventually(lambda: client.get("failover:before")) == b"kept"
        await client.set("failover:after", "new master")
        with redis.Redis.from_url(new.url, socket_timeout=2) as direct:
            assert direct.get("failover:after") == b"new master"
            assert direct.execute_command("ROLE")[0] == b"master"
    finally:
        await client.aclose()


def _scenario(folder: Path) -> Path:
    """One write with no approval (``reserve_unapproved``), its first model answer a little
    slow so that many runs are in flight when the master dies; then an answer."""
    reserve = {"event_id": "ws-200", "participant_id": "p-alice"}
    steps = [
        {
            "name": "reserve",
            "when": {"assistant_turns": 0},
            "tool_calls": [{"name": "reserve_unapproved", "arguments": reserve}],
            "fault": {"type": "delay", "first_byte_s": 0.3},
        },
        {"name": "report", "when": {"assistant_turns": 1}, "text": "Done."},
    ]
    (folder / f"{SCENARIO}.json").write_bytes(orjson.dumps({"steps": steps}))
    return folder


def _spec(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "api": "openai-chat",
        "model": SCENARIO,
        "input": "Reserve my seat.",
        "identity": {"user": "alice"},
        "allowed_tools": ["reserve_unapproved"],
        "max_turns": 3,
    }


@pytest.fixture
def system(sentinel: EmbeddedSentinel, tmp_path: Path) -> Iterator[LocalSystem]:
    spec = SystemSpec(
        services=("booking",),
        scripted_model=True,
        redis_url=sentinel.url,
        tool_modules=(durable_tools.MODULE,),
        scenarios=(_scenario(tmp_path),),
        env={
            "PYTHONPATH": str(REPO),
            "CALLGATE_WRITE_DURABILITY": "replica",
            "CALLGATE_CLAIM_IDLE_MS": "1000",
            "CALLGATE_MAX_DELIVERIES": "20",
        },
        grace_s=3.0,
    )
    with LocalSystem(spec) as started:
        yield started


async def _reserve_requests(booking_url: str) -> dict[str, int]:
    stats = await http_json("GET", f"{booking_url}/_stats")
    return dict(stats["reserve"]["requests_by_operation"])


async def _submit_and_kill(
    client: CallgateClient, sentinel: EmbeddedSentinel, run_ids: list[str]
) -> tuple[EmbeddedRedis, float]:
    """Submit ``run_ids`` one every `SUBMIT_EVERY_S`, and SIGKILL the master after `KILL_AFTER`
    of them, so runs are at every stage when it dies; the killed master and when it died."""
    old = sentinel.master()
    killed_at = 0.0
    for index, run_id in enumerate(run_ids):
        await _eventually(functools.partial(client.submit, _spec(run_id)))
        if index + 1 == KILL_AFTER:
            # What a submitter was told is queued survives; the workers' writes since are
            # left to the ledger's guards, as they would be.
            _replicate(old.url, 2)
            old.stop(kill=True)
            killed_at = time.monotonic()
        await asyncio.sleep(SUBMIT_EVERY_S)
    return old, killed_at


@pytest.mark.slow
async def test_runs_complete_through_a_master_failover_and_no_write_is_sent_twice(
    sentinel: EmbeddedSentinel, system: LocalSystem
) -> None:
    settings = Settings(redis_url=sentinel.url, key_prefix=system.env["CALLGATE_KEY_PREFIX"])
    booking = system.urls["booking"]
    run_ids = [f"fo-{i}" for i in range(RUNS)]
    async with CallgateClient(settings) as client:
        old, killed_at = await _submit_and_kill(client, sentinel, run_ids)
        new = sentinel.wait_for_failover(old)
        promoted_s = time.monotonic() - killed_at
        statuses = {}
        for run_id in run_ids:
            view = await _eventually(functools.partial(client.wait, run_id, SETTLE_S), SETTLE_S)
            statuses[run_id] = view["status"]
        views = [await client.view(run_id) for run_id in run_ids]
    settled_s = time.monotonic() - killed_at
    print(f"promoted in {promoted_s:.1f} s, every run settled {settled_s:.1f} s after the kill")
    assert set(statuses.values()) == {"completed"}, statuses
    assert new is not old
    sent = await _reserve_requests(booking)
    operations = [call["operation_id"] for view in views for call in view["calls"]]
    assert len(operations) == len(run_ids)
    assert all(view["calls"][0]["state"] == "succeeded" for view in views)
    assert {op: sent.get(op, 0) for op in operations} == dict.fromkeys(operations, 1)
    assert set(sent) == set(operations)  # no request the ledger does not know of
