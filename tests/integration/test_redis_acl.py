"""The Redis users of docker-compose.yml, attacked: a real redis-server started with the
deployment's redis.conf and users.acl (rendered by acl.sh), the whole pipeline running as
``workers``, and each other user trying what it must not.  Every refusal is asserted as Redis's
NOPERM, so a rule loosened in users.acl makes its test fail."""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, NoPermissionError

from callgate.auth.deployment import signer_of
from callgate.auth.keyring import LocalKeyring
from callgate.auth.tokens import sign_access
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk
from callgate.envelopes import OutcomeUnknown, encode
from callgate.keys import Keys
from callgate.ledger.group import APPLY_SHA
from callgate.ops.embedded_redis import free_port
from callgate.ops.stack import WORKERS
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.slack.messages import Notification
from callgate.slack.notifications import notification_worker
from tests.integration.redis_lockdown import (
    DEPLOY,
    PREFIX,
    TRAVEL_RUN,
    USERS,
    LockedRedis,
    assert_travel_completed,
    locked_redis,
    render_acl,
    run_travel,
    travel_system,
)

KEYS = Keys(PREFIX)
STREAMS = ("turns", "validate", "exec", "results", "reconcile", "notify", "dead")

Command = tuple[str | int, ...]
CONTAINERS = frozenset({"ACL", "CLIENT", "CONFIG", "FUNCTION", "SCRIPT", "XGROUP", "XINFO"})
"""Commands whose ACL name includes their subcommand (``config|set``)."""

WORKERS_MAY_NOT: tuple[Command, ...] = (
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "SET", "appendonly", "no"),
    ("ACL", "SETUSER", "intruder", "on", ">x", "~*", "+@all"),
    ("KEYS", "*"),
    ("SCAN", 0),
    ("SCRIPT", "FLUSH"),
    ("EVAL", "return 1", 0),
    ("FUNCTION", "LIST"),
    ("CLIENT", "LIST"),
    ("REPLICAOF", "127.0.0.1", 1),
    ("BGREWRITEAOF",),
    ("PUBLISH", "channel", "x"),
    ("SHUTDOWN", "NOSAVE"),
)
"""Commands workers do not have."""
FOREIGN_KEYS = ("other:x", "cgx:{p0}:run:x", "arqx:job:x")
"""Keys outside workers' patterns (another deployment's, a look-alike prefix)."""


def acl_name(command: Command) -> str:
    """The name ACL rules and ACL LOG give ``command``."""
    words = [str(word).lower() for word in command[:2]]
    return "|".join(words) if command[0] in CONTAINERS else words[0]


def refused(client: redis.Redis, *command: str | int) -> str:
    """Redis's NOPERM message for ``command``; the test fails if Redis runs it."""
    with pytest.raises(NoPermissionError) as error:
        client.execute_command(*command)
    return str(error.value)


def command_refused(client: redis.Redis, *command: str | int) -> None:
    """Refused because the user does not have the command at all (whatever the keys)."""
    message = refused(client, *command)
    assert f"no permissions to run the '{acl_name(command)}' command" in message, message


def key_refused(client: redis.Redis, *command: str | int) -> None:
    """Refused for the key: the user has the command, the rules keep it off this key."""
    assert "no permissions to access one of the keys" in refused(client, *command), command


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedRedis]:
    with locked_redis(tmp_path_factory.mktemp("acl")) as server:
        yield server


@pytest.fixture(scope="module")
def system(locked: LockedRedis) -> Iterator[tuple[LocalSystem, list[str]]]:
    """Every worker, as workers; and what the system printed while starting."""
    progress: list[str] = []
    started = travel_system(locked.url("workers"), progress)
    try:
        yield started, progress
    finally:
        started.stop()


async def test_the_whole_pipeline_runs_as_workers_and_redis_refuses_it_nothing(
    locked: LockedRedis, system: tuple[LocalSystem, list[str]]
) -> None:
    assert_travel_completed(await run_travel(locked.settings("workers")))
    attacks = {acl_name(c) for c in WORKERS_MAY_NOT} | set(FOREIGN_KEYS)
    refusals = [e for e in locked.refusals("workers") if e["object"] not in attacks]
    assert refusals == [], refusals
    # redis.conf's AOF is what the server runs with.
    assert (locked.server.directory / "appendonlydir").is_dir()


def test_workers_cannot_administer_redis_or_leave_their_keys(locked: LockedRedis) -> None:
    with locked.client("workers") as workers:
        for command in WORKERS_MAY_NOT:
            command_refused(workers, *command)
        for key in FOREIGN_KEYS:
            key_refused(workers, "HSET", key, "status", "completed")
    logged = {e["object"] for e in locked.refusals("workers")}
    assert {acl_name(c) for c in WORKERS_MAY_NOT} | set(FOREIGN_KEYS) <= logged, "in ACL LOG"


async def test_submitters_submit_and_read_runs_but_write_no_callgate_key(
    locked: LockedRedis, system: tuple[LocalSystem, list[str]]
) -> None:
    settings = locked.settings("submitters")
    view = await run_travel(settings)
    assert_travel_completed(view)
    run_id = view["run_id"]
    async with CallgateClient(settings) as client:
        assert [e.type for e in await client.events(run_id)]
        # Submitting again is harmless: the client sees the job's result and writes nothing.
        assert await client.submit({**TRAVEL_RUN, "run_id": run_id}) == run_id
    with locked.client("submitters") as submitters:
        run_key = KEYS.run(run_id)
        for command in (
            ("HSET", run_key, "status", "cancelled"),
            ("DEL", run_key),
            ("XADD", KEYS.stream("exec", 0), "*", "d", "{}"),
            ("EVALSHA", APPLY_SHA, 1, run_key, "{}"),
            ("SCRIPT", "LOAD", "return 1"),
            ("XADD", KEYS.stream("decisions", 0), "*", "d", "{}"),
            ("FLUSHALL",),
            ("KEYS", "*"),
        ):
            command_refused(submitters, *command)
        # Its writes reach arq's job key and queue only: no run, no result, no in-progress mark
        # (and a job key only create-only: test_submitter_attacks.py).
        key_refused(submitters, "SETNX", run_key, "x")
        key_refused(submitters, "ZADD", KEYS.deadlines(0), 1, run_id)
        key_refused(submitters, "SETNX", f"arq:result:{run_id}", "forged")
        key_refused(submitters, "SETNX", f"arq:in-progress:{run_id}", "1")
        key_refused(submitters, "ZADD", "arq:abort", 1, run_id)
    async with CallgateClient(settings) as client:
        assert (await client.status(run_id))["status"] == "completed"


async def test_approvers_post_decisions_and_write_nothing_else(locked: LockedRedis) -> None:
    with locked.client("approvers") as approvers:
        for partition in (0, 7, 42, 1023):
            assert approvers.xadd(KEYS.stream("decisions", partition), {"d": b"{}"})
        # Today's name of the decisions stream is refused too: the ACL names `decisions`.
        for kind in STREAMS:
            key_refused(approvers, "XADD", KEYS.stream(kind, 0), "*", "d", "{}")
        # Exactly a partition's stream: `cg:{p*}:decisions` would take any key ending so.
        key_refused(approvers, "XADD", "cg:{p0}:run:x}:decisions", "*", "d", "{}")
        key_refused(approvers, "XADD", KEYS.events("run-1"), "*", "type", "forged")
        command_refused(approvers, "HSET", KEYS.call("run-1", "call-1"), "state", "approved")
        command_refused(approvers, "ZREM", KEYS.pending_approvals(0), "run-1 appr-1")
        command_refused(approvers, "EVALSHA", APPLY_SHA, 1, KEYS.run("run-1"), "{}")
    async with CallgateClient(locked.settings("approvers")) as client:
        desk = ApprovalDesk(client.redis, client.keys, client.ledger)
        assert await desk.pending() == []
        assert await desk.find("appr-none") is None
        assert await desk.last_event_id("run-none") == "0-0"


async def test_slack_consumes_notifications_and_writes_only_decisions_and_dead_letters(
    locked: LockedRedis,
) -> None:
    notify = KEYS.stream("notify", 0)
    note = OutcomeUnknown(
        run_id="run-slack-acl",
        turn=1,
        call_id="t1.0",
        tool="reserve_seat",
        operation_id="op-1",
        detail="lost answer",
    )
    with locked.client("workers") as workers:
        workers.xadd(notify, {"d": encode(note)})
        workers.xadd(notify, {"d": b"not a notification"})
    posted: list[Notification] = []

    async def post(notification: Notification) -> None:
        posted.append(notification)

    client = aioredis.Redis.from_url(locked.url("slack"))
    try:
        consumer = notification_worker(client, locked.settings("slack"), post, group="slack-acl")
        await asyncio.wait_for(consumer.run_burst(), 20)
        assert await client.xadd(KEYS.stream("decisions", 0), {"d": b"{}"})
    finally:
        await client.aclose()
    assert [n.run_id for n in posted] == ["run-slack-acl"]
    assert consumer.stats.dead_lettered == 1  # XACK + XADD :dead in one Lua step
    with locked.client("slack") as slack:
        exec_stream = KEYS.stream("exec", 0)
        for kind in ("exec", "results", "turns", "validate"):
            key_refused(slack, "XADD", KEYS.stream(kind, 0), "*", "d", "{}")
        key_refused(slack, "XGROUP", "CREATE", exec_stream, "thief", "0", "MKSTREAM")
        key_refused(slack, "XREADGROUP", "GROUP", "executor", "thief", "STREAMS", exec_stream, ">")
        key_refused(slack, "XACK", exec_stream, "executor", "1-0")
        key_refused(slack, "XAUTOCLAIM", exec_stream, "executor", "thief", 0, "0-0")
        command_refused(slack, "HSET", KEYS.run("run-slack-acl"), "status", "cancelled")
        # Its Lua (heartbeat, dead letters) may run, on no key but its own.
        key_refused(slack, "EVALSHA", APPLY_SHA, 1, KEYS.run("run-slack-acl"), "{}")
        # It reads approval and call records and event logs (a resolution's verdict), nothing
        # else (no runs, history), and writes none of them.
        assert slack.hgetall(KEYS.approval("run-slack-acl", "appr-1")) == {}
        assert slack.hgetall(KEYS.call("run-slack-acl", "t1.0")) == {}
        assert slack.xrevrange(KEYS.events("run-slack-acl"), count=1) == []
        assert slack.xread({KEYS.events("run-slack-acl"): "0-0"}, block=1) == []
        key_refused(slack, "HGETALL", KEYS.run("run-slack-acl"))
        key_refused(slack, "XREVRANGE", KEYS.stream("exec", 0), "+", "-")
        key_refused(slack, "XADD", KEYS.events("run-slack-acl"), "*", "type", "call.resolved")


async def test_the_http_api_serves_as_api_and_redis_refuses_it_nothing(
    locked: LockedRedis, system: tuple[LocalSystem, list[str]]
) -> None:
    """`callgate serve` logged in as `api`: it submits, reads, streams, scrapes and records a
    refused request in the run's trace, and Redis refuses it nothing."""
    started, _ = system
    LocalKeyring(started.settings.home).ensure({}, {"api": ["*"]})  # its delegate key
    serve = [sys.executable, "-m", "callgate.ops.cli", "serve", "--port", "0"]
    url = started.start_listener("api", serve, {"REDIS_URL": locked.url("api")})
    bearer = {"Authorization": f"Bearer {sign_access(signer_of(started.settings, 'local'))}"}
    async with httpx.AsyncClient(base_url=url, timeout=20) as api:
        answer = await api.post("/runs", json=TRAVEL_RUN, headers=bearer)
        assert answer.status_code == 202 and answer.json()["created"], answer.text
        run_id = answer.json()["run_id"]
        deadline = time.monotonic() + 30
        while (view := (await api.get(f"/runs/{run_id}", headers=bearer)).json())[
            "status"
        ] != "completed" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert_travel_completed(view)
        assert (await api.get(f"/runs/{run_id}/events", headers=bearer)).status_code == 200
        assert (await api.get(f"/runs/{run_id}")).status_code == 401, locked.refusals("api")
        assert (await api.get("/metrics")).status_code == 200
    async with CallgateClient(locked.settings("workers")) as client:
        assert "api.unauthenticated" in [e.type for e in await client.events(run_id)]
    assert locked.refusals("api") == []
    with locked.client("api") as door:
        key_refused(door, "XADD", KEYS.stream("exec", 0), "*", "d", "{}")
        key_refused(door, "SETNX", f"arq:result:{run_id}", "forged")
        key_refused(door, "EVALSHA", APPLY_SHA, 1, KEYS.run(run_id), "{}")
        for command in (
            ("HSET", KEYS.run(run_id), "status", "cancelled"),
            ("DEL", KEYS.run(run_id)),
            ("XREADGROUP", "GROUP", "executor", "x", "STREAMS", KEYS.stream("exec", 0), ">"),
            ("KEYS", "*"),
        ):
            command_refused(door, *command)


def test_nobody_gets_in_without_a_user_and_its_password(locked: LockedRedis) -> None:
    port = locked.server.port
    attempts: list[dict[str, str]] = [
        {},
        {"username": "default", "password": "anything"},
        {"password": locked.passwords["workers"]},
        {"username": "workers", "password": "wrong"},
        {"username": "nobody", "password": locked.passwords["workers"]},
    ]
    for login in attempts:
        client = redis.Redis(port=port, socket_timeout=5, **login)
        with pytest.raises(AuthenticationError):
            client.ping()
        client.close()


def test_acl_sh_needs_every_password_and_writes_only_their_hashes(tmp_path: Path) -> None:
    passwords = {user: secrets.token_hex(16) for user in USERS}
    rendered = render_acl(passwords)
    for user, password in passwords.items():
        assert password not in rendered
        assert f"user {user} #{hashlib.sha256(password.encode()).hexdigest()} on " in rendered
    [default] = [line for line in rendered.splitlines() if line.startswith("user default ")]
    assert " off " in f"{default} " and ">" not in default and "#" not in default
    for missing in USERS:
        with pytest.raises(subprocess.CalledProcessError) as error:
            render_acl({u: p for u, p in passwords.items() if u != missing})
        assert f"REDIS_{missing.upper()}_PASSWORD is not set" in error.value.stderr
    rules = tmp_path / "open.acl"
    for text, why in (
        ("user default on nopass ~* +@all\n", "the default user must be off"),
        ("user default off on nopass ~* +@all\n", "the default user must be off"),
        ("user workers on ~* +@all\n", "no 'user default off' line"),
    ):
        rules.write_text(text)
        with pytest.raises(subprocess.CalledProcessError) as error:
            render_acl(passwords, rules)
        assert why in error.value.stderr


def test_callgate_up_never_prints_a_redis_password(
    locked: LockedRedis, system: tuple[LocalSystem, list[str]]
) -> None:
    started, progress = system
    password = locked.passwords["workers"]
    assert f"Redis at redis://workers:[redacted]@127.0.0.1:{locked.server.port}/0" in progress[0]
    # What every worker logged so far.
    assert not [line for line in [*progress, *started.tails(1000)] if password in line]
    # A REDIS_URL that does not answer is named too, before an embedded Redis is started.
    dead = f"redis://workers:{password}@127.0.0.1:{free_port()}/0"
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        replicas=dict.fromkeys(WORKERS, 0),
        env={"REDIS_URL": dead},
    )
    lines: list[str] = []
    with LocalSystem(spec, progress=lines.append):
        pass
    assert lines[0] == f"{dead.replace(password, '[redacted]')} does not answer; " + (
        "starting an embedded Redis"
    )
    assert not [line for line in lines if password in line]


def test_compose_logs_each_service_in_as_its_role_and_needs_every_password() -> None:
    compose = (DEPLOY.parents[1] / "docker-compose.yml").read_text()
    urls = re.findall(r"REDIS_URL=(.+)$", compose, re.MULTILINE)
    url = re.compile(r"redis://(\w+):\$\{REDIS_(\w+)_PASSWORD:\?[^}]+\}@redis:6379/0")
    logins = [url.fullmatch(u) for u in urls]
    assert all(m is not None and m[1].upper() == m[2] for m in logins), urls
    # worker, bot, HTTP API, submit
    assert [m[1] for m in logins if m] == ["workers", "slack", "api", "submitters"]
    assert "redis://slack:" in compose.split("slack_approvals:")[1]
    for user in USERS:
        name = f"REDIS_{user.upper()}_PASSWORD"
        assert f"{name}: ${{{name}:?" in compose, f"the redis service needs {name}"
    assert "acl.sh /etc/callgate-redis/users.acl > /run/callgate-redis/users.acl" in compose
    assert '["redis-server", "/etc/callgate-redis/redis.conf"]' in compose
    conf = (DEPLOY / "redis.conf").read_text().splitlines()
    assert {"aclfile /run/callgate-redis/users.acl", "appendonly yes"} <= set(conf)
    assert "CALLGATE_KEY_PREFIX=cg" in compose and "CALLGATE_KEY_PREFIX\n" not in compose
