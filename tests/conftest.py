"""Shared fixtures: a private redis-server per test session, a fresh key prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from callgate.auth.keyring import LocalKeyring
from callgate.config import Settings
from callgate.ops.bench.tools import MODULE as BENCH_TOOLS
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.standins.demo import FAULTY
from callgate.standins.demo import TOOL_MODULES as DEMO_TOOLS

TEST_TOOLS = (*DEMO_TOOLS, BENCH_TOOLS, FAULTY)
"""What a test deployment registers: the demo's tools, the benchmark's and the faulty ones."""


DEPLOYMENT_MODES: dict[str, dict[str, str]] = {
    "default": {},
    "carry-off": {"CALLGATE_CARRY": "0"},
    "redis-py": {"CALLGATE_WIRE": "redis-py"},
    "cluster": {"CALLGATE_PARTITIONS": "3"},
}
CLUSTER_PARTITIONS = int(DEPLOYMENT_MODES["cluster"]["CALLGATE_PARTITIONS"])
"""Each way the pipeline can run: messages carry the facts their reader decides on (default)
or every reader loads them from the ledger; the ledger's commands go over a bare hiredis
connection (default) or plain redis-py; one Redis, or a Redis Cluster of three masters with
the runs' three partitions on a master each (`store_url`).  The e2e and conformance suites run in
each."""


@pytest.fixture(scope="module", params=list(DEPLOYMENT_MODES))
def deployment_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """One of `DEPLOYMENT_MODES`, in the environment every process started meanwhile gets."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in DEPLOYMENT_MODES[request.param].items():
            patch.setenv(name, value)
        yield request.param


TEST_PEOPLE = {
    "carol": ["events-lead"],
    "dave": ["finance"],
    "alice": [],
    "bob": [],
    "operator": ["operator"],
}
"""Who has a key and roles in the tests' keyring (carol approves; alice requests)."""
TEST_DELEGATES = {"slack": ["carol", "dave"]}


@pytest.fixture(scope="session", autouse=True)
def callgate_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One keyring and trust file for the session, in the environment every process started
    by a test inherits: what a machine running `callgate up` has."""
    home = tmp_path_factory.mktemp("callgate-home")
    keyring = LocalKeyring(home)
    keyring.ensure(TEST_PEOPLE, TEST_DELEGATES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALLGATE_HOME", str(home))
        patch.setenv("CALLGATE_TRUST_FILE", str(keyring.trust_file))
        yield home


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedCluster]:
    """A local Redis Cluster (three masters, a replica each), started on first use, with the
    `cluster` mode's three partitions on a master each."""
    with EmbeddedCluster() as cluster:
        cluster.spread(CLUSTER_PARTITIONS)
        yield cluster


@pytest.fixture(scope="module")
def store_url(deployment_mode: str, request: pytest.FixtureRequest) -> str:
    """Where a suite run in `deployment_mode` keeps its runs: the session's Redis, or the
    session's cluster in the ``cluster`` mode."""
    if deployment_mode == "cluster":
        cluster: EmbeddedCluster = request.getfixturevalue("redis_cluster")
        return cluster.cluster_url
    server: EmbeddedRedis = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def settings(redis_server: EmbeddedRedis) -> Settings:
    """Settings pointing at the private server, with a key prefix no other test uses."""
    return Settings(
        redis_url=redis_server.url,
        key_prefix=f"t{uuid.uuid4().hex[:10]}",
        tool_modules=TEST_TOOLS,
        claim_idle_ms=300,
        heartbeat_ms=100,
        read_block_ms=50,
    )


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def subprocess_env(settings: Settings) -> dict[str, str]:
    """Environment for worker subprocesses: the same Redis and prefix as the test."""
    env = dict(os.environ)
    env.update(
        REDIS_URL=settings.redis_url,
        CALLGATE_KEY_PREFIX=settings.key_prefix,
        CALLGATE_TOOL_MODULES=",".join(settings.tool_modules),
        CALLGATE_CLAIM_IDLE_MS=str(settings.claim_idle_ms),
        CALLGATE_HEARTBEAT_MS=str(settings.heartbeat_ms),
        CALLGATE_READ_BLOCK_MS=str(settings.read_block_ms),
        PYTHONUNBUFFERED="1",
    )
    return env
