"""`callgate doctor`'s Redis checks against real servers, written as the misconfigurations they
catch: a login whose ACL lets it do what README's Security table says it cannot (users.acl
with one rule too many), a Redis that lets anyone in, a wrong password, a worker kind nobody
serves.  The deployment as shipped passes each, and the checks read a Redis Cluster too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from callgate.config import Settings
from callgate.connect import redis_client
from callgate.keys import Keys
from callgate.ops.doctor_checks import (
    check_clock,
    check_login,
    check_no_anonymous,
    check_stranded,
    check_workers,
)
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.streams.upkeep import announce
from tests.integration.redis_lockdown import DEPLOY, PREFIX, USERS, locked_redis

KEYS = Keys(PREFIX)


async def test_the_shipped_logins_do_what_the_security_table_says(tmp_path: Path) -> None:
    with locked_redis(tmp_path) as locked:
        for user in USERS:
            ok, line = await check_login(locked.url(user), KEYS)
            assert ok, line
            assert locked.passwords[user] not in line
        assert await check_no_anonymous(locked.url("workers")) == (
            True, "Redis refuses a client without a user and password")  # fmt: skip
        wrong = locked.url("approvers").replace(locked.passwords["approvers"], "0" * 32)
        ok, line = await check_login(wrong, KEYS)
        assert not ok and "approvers" in line and "0" * 32 not in line, line


@pytest.mark.parametrize(("user", "extra", "caught"), [
    ("submitters", "+del", "can DEL arq:job:doctor-probe"),
    ("slack", "%R~cg:*", "can HGETALL cg:{p0}:run:doctor-probe"),
    ("workers", "+config|get", "can CONFIG GET"),
])  # fmt: skip
async def test_a_login_allowed_too_much_is_named(
    tmp_path: Path, user: str, extra: str, caught: str
) -> None:
    rules = (DEPLOY / "users.acl").read_text()
    rules = rules.rstrip() + "\n\n"
    end = rules.index("\n\n", rules.index(f"user {user} on "))  # the last line of its rules
    rules = f"{rules[:end]}\n  {extra}{rules[end:]}"
    widened = tmp_path / "users.acl.in"
    widened.write_text(rules)
    with locked_redis(tmp_path, rules=widened) as locked:
        ok, line = await check_login(locked.url(user), KEYS)
    assert not ok and caught in line and "acl.sh" in line, line


async def test_a_redis_anyone_may_use_is_named(redis_server: EmbeddedRedis) -> None:
    ok, line = await check_no_anonymous(redis_server.url)
    assert not ok and "without a user and password" in line, line


async def test_a_worker_kind_nobody_serves_is_named(settings: Settings) -> None:
    lines = await check_workers(settings)
    assert [ok for ok, _ in lines] == [False] * 5 and "model_turn: no live worker" in lines[1][1]
    keys = Keys(settings.key_prefix)
    client = Redis.from_url(settings.redis_url)
    alive = asyncio.create_task(announce(client, keys.consumers("model_turn"), "model_turn-1"))
    try:
        await asyncio.sleep(0.1)
        lines = await check_workers(settings)
    finally:
        alive.cancel()
        await client.aclose()
    assert lines[1] == (True, "model_turn: 1 live process"), lines
    assert not lines[2][0], "the validator still has none"


async def test_on_a_cluster_doctor_logs_in_finds_the_workers_and_reads_every_partition(
    redis_cluster: EmbeddedCluster,
) -> None:
    settings = Settings(redis_url=redis_cluster.cluster_url, key_prefix="dr", partitions=3)
    keys = Keys("dr", 3)
    ok, line = await check_login(settings.redis_url, keys)
    assert ok and "Redis login default at redis+cluster://" in line, line
    client = redis_client(settings.redis_url)
    presence = asyncio.create_task(announce(client, keys.consumers("executor"), "executor-1"))
    try:
        await asyncio.sleep(0.3)
        lines = dict((text.split(":")[0], ok) for ok, text in await check_workers(settings))
        assert lines["executor"] is True and lines["ingress"] is False, lines
        stranded = await check_stranded(settings)
        assert stranded == [(True, "no stranded calls (0 live runs)")], stranded
        ok, line = await check_clock(settings)
        assert ok, line
    finally:
        presence.cancel()
        await client.aclose()
