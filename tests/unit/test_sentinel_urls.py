"""``redis+sentinel://`` URLs: read once, the same by redis-py's client and arq; a bad one is one
line that never holds the password; the client made of one asks the sentinels for the master,
with the connection options of every other client, and never takes the hiredis fast path."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedConnection

from callgate.config import Settings, bad_settings
from callgate.connect import (
    HEALTH_CHECK_S,
    SENTINEL_TIMEOUT_S,
    SentinelAddress,
    redis_client,
    sentinel_address,
)
from callgate.jobs import redis_settings
from callgate.ledger.wire import wire_address
from callgate.logs import MASK, mask_url_password

SECRET = "s3cr3t-Pw_9f"
URL = f"redis+sentinel://work%40ers:{SECRET}@s1:26380,s2,[::1]:26381/callgate/2"


def test_a_sentinel_url_names_the_sentinels_the_master_and_its_login() -> None:
    assert sentinel_address(URL) == SentinelAddress(
        sentinels=(("s1", 26380), ("s2", 26379), ("::1", 26381)),
        master="callgate",
        db=2,
        username="work@ers",
        password=SECRET,
    )
    assert sentinel_address("REDIS+SENTINEL://:pw@s1/m/") == SentinelAddress(
        (("s1", 26379),), "m", 0, None, "pw"
    )


@pytest.mark.parametrize(
    "url", ["redis://h:6379/0", "rediss://:pw@h:6380/0", "unix:///run/redis.sock", "h:6379"]
)
def test_other_urls_are_left_to_redis_py(url: str) -> None:
    assert sentinel_address(url) is None


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        ("s1:26379", "no master name"),
        ("s1:26379/", "no master name"),
        ("s1:x/m", "has a bad port"),
        ("s1:26379,/m", "a sentinel host is empty"),
        ("s1:26379/m/zero", "is not a number"),
        ("s1:26379/m/0?ssl_ca_certs=/ca.crt", "no query or fragment"),
    ],
)
def test_a_bad_sentinel_url_is_one_line_without_the_password(tail: str, reason: str) -> None:
    url = f"redis+sentinel://u:{SECRET}@{tail}"
    with pytest.raises(ValueError, match=reason) as raised:
        sentinel_address(url)
    assert SECRET not in str(raised.value)
    with pytest.raises(ValidationError) as invalid:
        Settings(redis_url=url)
    line = bad_settings(invalid.value)
    assert line is not None and reason in line and "\n" not in line
    assert SECRET not in line and MASK not in line  # the form shown is no URL to mask


def test_arq_connects_through_the_same_sentinels() -> None:
    arq = redis_settings(Settings(redis_url=URL))
    assert arq.sentinel and arq.sentinel_master == "callgate"
    assert arq.host == [("s1", 26380), ("s2", 26379), ("::1", 26381)]
    assert (arq.database, arq.username, arq.password) == (2, "work@ers", SECRET)


async def test_the_client_asks_the_sentinels_and_keeps_every_connection_option() -> None:
    client = redis_client(URL)
    try:
        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "callgate"
        assert pool.connection_class is SentinelManagedConnection
        options = pool.connection_kwargs
        assert options["health_check_interval"] == HEALTH_CHECK_S and options["socket_keepalive"]
        assert options["lib_name"] is None and options["lib_version"] is None
        assert (options["db"], options["username"], options["password"]) == (2, "work@ers", SECRET)
        [first, *_] = pool.sentinel_manager.sentinels
        asking = first.connection_pool.connection_kwargs
        assert asking["socket_timeout"] == SENTINEL_TIMEOUT_S and asking["lib_name"] is None
        assert asking["password"] is None  # the master's login is not the sentinels'
        assert wire_address(client) is None  # the master moves: redis-py's path follows it
    finally:
        await client.aclose()


def test_a_sentinel_url_password_is_masked_in_logs() -> None:
    shown = mask_url_password(f"Redis at {URL}, key prefix cg")
    assert SECRET not in shown
    assert f"work%40ers:{MASK}@s1:26380,s2,[::1]:26381/callgate/2" in shown
