"""TLS end to end: redis-server with TLS only (``--port 0 --tls-port``, a CA and a server
certificate made for the test) and the deployment's users, the whole pipeline over ``rediss://``
with the server's certificate and host name verified, and no client that falls back to
plaintext — neither arq (whose settings `callgate.jobs.redis_settings` builds from the URL), nor
redis-py, nor the ledger's hot-path wire, which only speaks plain TCP."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from arq.connections import create_pool

from callgate.config import Settings
from callgate.jobs import redis_settings
from callgate.ledger.wire import wire_address
from callgate.ops.embedded_redis import RedisTls, redis_answers
from callgate.ops.system import LocalSystem
from tests.integration.redis_lockdown import (
    OPERATOR,
    LockedRedis,
    assert_travel_completed,
    locked_redis,
    make_ca,
    make_tls,
    run_travel,
    travel_system,
)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> RedisTls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, tls: RedisTls) -> Iterator[LockedRedis]:
    with locked_redis(tmp_path_factory.mktemp("tls-redis"), tls) as server:
        yield server


@pytest.fixture(scope="module")
def system(locked: LockedRedis) -> Iterator[LocalSystem]:
    started = travel_system(locked.url("workers"), [])
    try:
        yield started
    finally:
        started.stop()


async def test_the_whole_pipeline_runs_over_tls_with_the_server_verified(
    locked: LockedRedis, system: LocalSystem
) -> None:
    url = locked.url("workers")
    assert url.startswith("rediss://")
    assert "ssl_cert_reqs=required" in url and "ssl_check_hostname=true" in url
    assert_travel_completed(await run_travel(locked.settings("workers")))
    # A submitter's arq enqueue and reads, over TLS with its own user.
    assert_travel_completed(await run_travel(locked.settings("submitters")))
    assert locked.refusals("workers") == locked.refusals("submitters") == []


def test_the_plaintext_port_is_closed(locked: LockedRedis) -> None:
    with locked.client(OPERATOR) as operator:
        assert operator.config_get("port") == {"port": "0"}  # redis.conf's `port 6379` is off
    port, password = locked.server.port, locked.passwords["workers"]
    assert not redis_answers(f"redis://workers:{password}@127.0.0.1:{port}/0", timeout_s=2)
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=port, username="workers", password=password, socket_timeout=2).ping()


async def test_a_server_certificate_our_ca_did_not_sign_is_refused_by_every_client(
    locked: LockedRedis, tls: RedisTls, tmp_path: Path
) -> None:
    other_ca, _, _ = make_ca(tmp_path, "someone-else")
    wrong_ca = locked.url("workers").replace(str(tls.ca_file), str(other_ca))
    no_ca = locked.url("workers").replace(f"ssl_ca_certs={tls.ca_file}&", "")
    for url in (wrong_ca, no_ca):
        with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            redis.Redis.from_url(url, socket_timeout=5).ping()
        client = aioredis.Redis.from_url(url, socket_timeout=5)
        with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.ping()
        await client.aclose()
        arq_settings = redis_settings(Settings(redis_url=url))
        arq_settings.conn_retries = 0
        with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await create_pool(arq_settings)


async def test_arq_gets_the_same_tls_settings_as_redis_py(locked: LockedRedis) -> None:
    url = locked.url("submitters")
    arq_settings = redis_settings(Settings(redis_url=url))
    pool = await create_pool(arq_settings)
    try:
        connections = pool.connection_pool
        assert connections.connection_class is aioredis.SSLConnection
        kwargs = connections.connection_kwargs
        assert (kwargs["username"], kwargs["password"]) == (
            "submitters",
            locked.passwords["submitters"],
        )
        context = connections.make_connection().ssl_context.get()
        assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
        assert await pool.ping()
    finally:
        await pool.aclose()


def test_the_hot_path_wire_stands_aside_for_tls(locked: LockedRedis, tls: RedisTls) -> None:
    """The wire (plain TCP, hiredis) takes a client only when it is plain TCP; a TLS client's
    commands go through redis-py's TLS connection (the pipeline test runs with no plaintext
    port at all, so one sent in the clear would have failed it)."""
    port = locked.server.port
    assert wire_address(aioredis.Redis.from_url(locked.url("workers"))) is None
    assert wire_address(aioredis.Redis(port=port, ssl=True, ssl_ca_certs=str(tls.ca_file))) is None
    plain = wire_address(aioredis.Redis.from_url(f"redis://workers:pw@127.0.0.1:{port}/0"))
    assert plain is not None and (plain.host, plain.port, plain.username) == (
        "127.0.0.1",
        port,
        "workers",
    )
