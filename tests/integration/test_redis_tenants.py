"""Tenants attacked (issue 31, attack 5): one tenant's logins read another tenant's runs.

A real redis-server locked down by the deployment's users.acl, rendered by acl.sh for the
tenants acme and globex (tests/integration/redis_lockdown.py); the workers, the example notes
agent's tools and service and the scripted model as real processes.  Alice's run of tenant acme
asks to add a note reading "Door code 4711" and pauses for an editor's approval.  Logged in as
``submitters_globex`` and as ``approvers_globex``, every read of that run's keys (record,
history, raw responses, calls, events, approval, …), its arq result and acme's runs index and
inbox is refused by Redis, and so is every tenant login's read of the partition's inbox (every
tenant's run ids); `callgate runs`, `view`, `approvals` and `inbox` under globex's login show
none of it, and under acme's they do; an approval or a cancel takes the entry out of acme's
inbox as out of the partition's.  A globex submitter cannot start a run under an ``acme.`` run
id: Redis refuses its login the job, and the ingress refuses such a job from any login.  And the
legitimate single-tenant path works under the untenanted logins README documents: run, runs,
view, approve (one write), cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.exceptions import NoPermissionError

from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import new_private_key, public_key_text, write_private_key
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.errors import JobFailedError, NotFoundError
from callgate.keys import Keys
from callgate.ops.embedded_redis import free_port
from callgate.ops.system import LocalSystem, SystemSpec
from tests.integration.redis_lockdown import (
    DEPLOY,
    OPERATOR,
    PREFIX,
    TENANT_USERS,
    TENANTS,
    USERS,
    LockedRedis,
    locked_redis,
    render_acl,
)

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = b"Door code 4711"
"""In the note alice's run asks to add (the example scenario's arguments)."""
KEYS = Keys(PREFIX)


@dataclass
class Tenants:
    """The locked-down deployment, its processes and home (keys, trust file)."""

    locked: LockedRedis
    system: LocalSystem
    home: Path

    def settings(self, user: str, tenant: str | None) -> Settings:
        """A client of ``user``'s login, signing as ``tenant``'s submitting service."""
        name = f"{tenant}_frontdesk" if tenant else "local"
        key = LocalKeyring(self.home).key_path(name)
        return Settings(
            redis_url=self.locked.url(user),
            key_prefix=PREFIX,
            read_block_ms=50,
            tenant=tenant,
            home=self.home,
            trust_file=self.home / "trust.json",
            submitter=name,
            signing_key=key if tenant else None,
        )

    def submitter_env(self, tenant: str) -> dict[str, str]:
        """The environment that makes the CLI sign as ``tenant``'s submitting service."""
        name = f"{tenant}_frontdesk"
        return {
            "CALLGATE_SUBMITTER": name,
            "CALLGATE_SIGNING_KEY": str(LocalKeyring(self.home).key_path(name)),
        }

    def callgate(
        self, user: str, tenant: str | None, *args: str, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        """The `callgate` command as someone holding ``user``'s login runs it."""
        env = {
            **self.system.env,
            "REDIS_URL": self.locked.url(user),
            "CALLGATE_KEY_PREFIX": PREFIX,
            "CALLGATE_HOME": str(self.home),
            **extra,
        }
        env.pop("CALLGATE_TENANT", None)
        if tenant is not None:
            env["CALLGATE_TENANT"] = tenant
        return subprocess.run(
            [sys.executable, "-m", "callgate.ops.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )


def _tenant_submitters(home: Path) -> None:
    """A submitting service per tenant, each allowed to assert its own tenant only."""
    trust_file = home / "trust.json"
    document = json.loads(trust_file.read_text())
    for tenant in ("acme", "globex"):
        key = new_private_key()
        write_private_key(LocalKeyring(home).key_path(f"{tenant}_frontdesk"), key)
        document["submitters"][f"{tenant}_frontdesk"] = {
            "public_key": public_key_text(key),
            "grants": ["*"],
            "attributes": {"tenant": [tenant]},
        }
    trust_file.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    home = tmp_path_factory.mktemp("tenants-home")
    LocalKeyring(home).ensure({"carol": ["editor"], "alice": [], "bob": []})
    _tenant_submitters(home)
    notes_port, model_port = free_port(), free_port()
    path = [str(EXAMPLES), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {
        "PYTHONPATH": os.pathsep.join(path),
        "CALLGATE_HOME": str(home),
        "CALLGATE_TRUST_FILE": str(home / "trust.json"),
        "NOTES_URL": f"http://127.0.0.1:{notes_port}",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "OPENAI_API_KEY": "scripted-local",
    }
    with locked_redis(tmp_path_factory.mktemp("tenants-acl")) as locked:
        spec = SystemSpec(
            services=(),
            scripted_model=False,
            redis_url=locked.url("workers"),
            key_prefix=PREFIX,
            tool_modules=("notes_agent.tools",),
            env=env,
            grace_s=3.0,
        )
        with LocalSystem(spec) as system:
            system.start_listener(
                "model",
                [
                    sys.executable,
                    "-m",
                    "callgate.standins.scripted_model",
                    "--port",
                    str(model_port),
                    "--scenarios",
                    str(EXAMPLES / "notes_agent" / "scenarios"),
                ],
            )
            system.start_listener(
                "notes", [sys.executable, "-m", "notes_agent.service", "--port", str(notes_port)]
            )
            yield Tenants(locked, system, home)


async def paused_note(tenants: Tenants, user: str, tenant: str) -> dict[str, Any]:
    """``user`` of ``tenant`` asks for a team note; the run's view once paused for approval."""
    spec = {
        "api": "openai-chat",
        "model": "notes-agent",
        "input": f"standup of {user}",
        "identity": {"user": user, "tenant": tenant},
        "allowed_tools": ["search_notes", "add_note"],
    }
    async with CallgateClient(tenants.settings(f"submitters_{tenant}", tenant)) as client:
        run_id = await client.submit(spec)
        deadline = time.monotonic() + 30
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFoundError):
                view = await client.view(run_id)
            if view.get("status") == "paused_approval":
                return view
            await asyncio.sleep(0.05)
    raise AssertionError(f"{run_id} did not pause for approval: {view}")


@pytest.fixture(scope="module")
def acme_run(tenants: Tenants) -> dict[str, Any]:
    """Alice's run of acme, paused on her note (and bob's of globex beside it)."""
    view = asyncio.run(paused_note(tenants, "alice", "acme"))
    asyncio.run(paused_note(tenants, "bob", "globex"))
    return view


def acme_reads(view: dict[str, Any], approval_id: str) -> list[tuple[str | int, ...]]:
    """Every read of alice's run that a login of hers may make, one per key it has."""
    run_id = view["run_id"]
    reads: list[tuple[str | int, ...]] = [
        ("HGETALL", KEYS.run(run_id)),
        ("LRANGE", KEYS.history(run_id), 0, -1),
        ("HGETALL", KEYS.raw_responses(run_id)),
        ("HGETALL", KEYS.run_index(run_id)),
        ("XRANGE", KEYS.events(run_id), "-", "+"),
        ("XREVRANGE", KEYS.events(run_id), "+", "-"),
        ("XREAD", "COUNT", 1, "STREAMS", KEYS.events(run_id), "0-0"),
        ("HGETALL", KEYS.approval(run_id, approval_id)),
        ("HGETALL", KEYS.decisions_seen(run_id)),
        ("ZRANGE", KEYS.runs_index(0, "acme"), 0, -1),
        ("ZRANGE", KEYS.pending_approvals(0, "acme"), 0, -1, "WITHSCORES"),
        ("ZRANGE", KEYS.unresolved_calls(0, "acme"), 0, -1),
        ("GET", f"arq:result:{run_id}"),
    ]
    reads += [("HGETALL", KEYS.call(run_id, c["call_id"])) for c in view["calls"]]
    return reads


def test_another_tenants_logins_read_nothing_of_alices_run(
    tenants: Tenants, acme_run: dict[str, Any]
) -> None:
    run_id = acme_run["run_id"]
    assert run_id.startswith("acme."), run_id
    [note] = [c for c in acme_run["calls"] if c["tool"] == "add_note"]
    with tenants.locked.client("submitters_acme") as acme:
        approval_id = acme.hget(KEYS.call(run_id, note["call_id"]), "approval_id")
        assert isinstance(approval_id, bytes)
        reads = acme_reads(acme_run, approval_id.decode())
        history = acme.lrange(KEYS.history(run_id), 0, -1)
        assert any(SECRET in item for item in history), "what is at stake: her note"
        for command in reads:
            acme.execute_command(*command)  # each read is one her own login may make
    for user in ("submitters_globex", "approvers_globex"):
        with tenants.locked.client(user) as globex:
            for command in reads:
                with pytest.raises(NoPermissionError):
                    globex.execute_command(*command)
                    pytest.fail(f"{user} read {command}")
            # Its own runs index and inbox it reads; acme's run is in neither.
            own = globex.zrange(KEYS.runs_index(0, "globex"), 0, -1)
            assert own and run_id.encode() not in own
            inbox = [m.decode() for m in globex.zrange(KEYS.pending_approvals(0, "globex"), 0, -1)]
            assert inbox and all(m.startswith("globex.") for m in inbox), inbox
    with tenants.locked.client("approvers_acme") as approvers:
        for command in reads:
            if command[0] != "GET":  # approvers read no arq result at all
                approvers.execute_command(*command)


PARTITION_INBOX = [
    read
    for index in (KEYS.pending_approvals(0), KEYS.unresolved_calls(0))
    for read in (("ZRANGE", index, 0, -1), ("ZSCAN", index, 0))
]
"""The partition's inbox indices: every tenant's run ids, approval and call ids, and times."""


def _pending_member(tenants: Tenants, view: dict[str, Any]) -> str:
    """The inbox entry of the approval ``view``'s run waits on: ``"<run id> <approval id>"``."""
    [note] = [c for c in view["calls"] if c["tool"] == "add_note"]
    with tenants.locked.client(OPERATOR) as operator:
        approval_id = operator.hget(KEYS.call(view["run_id"], note["call_id"]), "approval_id")
    assert isinstance(approval_id, bytes)
    return f"{view['run_id']} {approval_id.decode()}"


def _pending_in(tenants: Tenants, member: str) -> tuple[bool, bool]:
    """Whether the partition's pending approvals hold ``member``, and whether acme's do."""
    with tenants.locked.client(OPERATOR) as op:
        found = [op.zscore(KEYS.pending_approvals(0, t), member) for t in (None, "acme")]
    return found[0] is not None, found[1] is not None


def test_no_tenants_login_reads_the_partitions_inbox(
    tenants: Tenants, acme_run: dict[str, Any]
) -> None:
    member = _pending_member(tenants, acme_run)
    assert _pending_in(tenants, member) == (True, True), "what is at stake: acme's entry"
    for user in TENANT_USERS:
        with tenants.locked.client(user) as login:
            for command in PARTITION_INBOX:
                if command[0] == "ZSCAN" and user.startswith("submitters"):
                    continue  # submitters have no ZSCAN at all
                with pytest.raises(NoPermissionError, match="no permissions to access one of"):
                    login.execute_command(*command)
                    pytest.fail(f"{user} read {command}")
    with tenants.locked.client("approvers") as untenanted:  # the single-tenant login still does
        assert member.encode() in untenanted.zrange(KEYS.pending_approvals(0), 0, -1)
    # globex's approvers read their own inbox: the CLI lists their runs' entries, no acme's.
    inbox = tenants.callgate("approvers_globex", "globex", "inbox", "--json")
    assert inbox.returncode == 0, inbox.stderr
    listed = orjson.loads(inbox.stdout)
    assert listed["approvals"] and listed["unresolved"] == []
    assert all(a["run_id"].startswith("globex.") for a in listed["approvals"]), listed


def test_the_cli_under_a_tenants_login_lists_and_shows_its_runs_only(
    tenants: Tenants, acme_run: dict[str, Any]
) -> None:
    run_id = acme_run["run_id"]
    listed = tenants.callgate("submitters_globex", "globex", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = [row["run_id"] for row in orjson.loads(listed.stdout)]
    assert runs and run_id not in runs and all(r.startswith("globex.") for r in runs)
    shown = tenants.callgate("submitters_globex", "globex", "view", run_id, "--json")
    assert shown.returncode == 1 and "Redis refused" in shown.stderr, shown
    assert SECRET.decode() not in shown.stdout + shown.stderr
    inbox = tenants.callgate("approvers_globex", "globex", "approvals", "--json")
    assert inbox.returncode == 0, inbox.stderr
    pending = [a["run_id"] for a in orjson.loads(inbox.stdout)]
    assert pending and run_id not in pending and all(r.startswith("globex.") for r in pending)

    listed = tenants.callgate("submitters_acme", "acme", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert run_id in [row["run_id"] for row in orjson.loads(listed.stdout)]
    shown = tenants.callgate("submitters_acme", "acme", "view", run_id, "--json")
    assert shown.returncode == 0 and orjson.loads(shown.stdout)["run_id"] == run_id, shown
    inbox = tenants.callgate("approvers_acme", "acme", "approvals", "--json")
    assert inbox.returncode == 0, inbox.stderr
    assert [a["run_id"] for a in orjson.loads(inbox.stdout)] == [run_id]
    # Carol approves alice's note under acme's approvers login; globex's does not find it.
    [approval] = orjson.loads(inbox.stdout)
    approve = ("approve", approval["approval_id"], "--as", "carol")
    missed = tenants.callgate("approvers_globex", "globex", *approve)
    assert missed.returncode == 1 and "no pending approval" in missed.stderr, missed
    member = f"{run_id} {approval['approval_id']}"
    assert _pending_in(tenants, member) == (True, True)
    approved = tenants.callgate("approvers_acme", "acme", *approve)
    assert approved.returncode == 0, approved.stderr
    assert _pending_in(tenants, member) == (False, False)
    # A follow-up input: acme's service may send one (its job id carries acme's prefix);
    # globex's login may not even enqueue it.
    reply = ("reply", run_id, "--input", "thanks", "--policy", "enqueue", "--timeout", "30")
    foreign = tenants.callgate(
        "submitters_globex", "globex", *reply, **tenants.submitter_env("globex")
    )
    assert foreign.returncode == 1 and "Redis refused" in foreign.stderr, foreign
    replied = tenants.callgate("submitters_acme", "acme", *reply, **tenants.submitter_env("acme"))
    assert replied.returncode == 0 and "reply admitted" in replied.stdout, replied
    # The tenants acl.sh renders users for are the trust file's.
    assert tenants.callgate("submitters_acme", None, "tenants").stdout == "acme globex\n"
    # Without its tenant set, the CLI reads the deployment's index, which Redis refuses it.
    unset = tenants.callgate("submitters_globex", None, "runs")
    assert unset.returncode == 1 and "Redis refused" in unset.stderr, unset


def test_a_cancel_under_acmes_login_takes_the_approval_out_of_acmes_inbox(
    tenants: Tenants, acme_run: dict[str, Any]
) -> None:
    view = asyncio.run(paused_note(tenants, "alice", "acme"))
    member = _pending_member(tenants, view)
    assert _pending_in(tenants, member) == (True, True)
    cancel = ("cancel", view["run_id"], "--as", "alice")
    foreign = tenants.callgate("approvers_globex", "globex", *cancel)
    assert foreign.returncode == 1 and "Redis refused" in foreign.stderr, foreign
    cancelled = tenants.callgate("approvers_acme", "acme", *cancel)
    assert cancelled.returncode == 0, cancelled.stderr
    assert _pending_in(tenants, member) == (False, False)


async def test_a_globex_submitter_cannot_start_a_run_under_an_acme_run_id(
    tenants: Tenants, acme_run: dict[str, Any]
) -> None:
    bob = {
        "api": "openai-chat",
        "model": "notes-agent",
        "input": "standup",
        "identity": {"user": "bob", "tenant": "globex"},
    }
    # Its own login may not even write the job.
    async with CallgateClient(tenants.settings("submitters_globex", "globex")) as client:
        with pytest.raises(NoPermissionError):
            await client.submit({**bob, "run_id": "acme.stolen-1"})
    # Through a login that may (the untenanted submitters), the ingress refuses it: globex's
    # signature, as globex or as no tenant, under a run id of acme's.
    globex = tenants.settings("submitters", "globex").model_copy(update={"tenant": None})
    untenanted = {**bob, "identity": {"user": "bob"}}
    async with CallgateClient(globex) as client:
        for spec, reason in (
            ({**bob, "run_id": "acme.stolen-2"}, "needs a run id starting 'globex.'"),
            ({**untenanted, "run_id": "acme.stolen-3"}, "belong to tenant acme"),
            ({**bob, "run_id": "run-stolen-4"}, "needs a run id starting 'globex.'"),
        ):
            run_id = await client.submit(spec)
            with pytest.raises(JobFailedError, match=reason):
                await client.wait(run_id, 30)
    # Acme's own service submits under its login with `callgate run`, minting an acme id.
    started = tenants.callgate(
        "submitters_acme",
        "acme",
        "run",
        "--api",
        "openai-chat",
        "--model",
        "notes-agent",
        "--tools",
        "search_notes",
        "--input",
        "standup",
        "--identity",
        '{"user": "alice", "tenant": "acme"}',
        **tenants.submitter_env("acme"),
    )
    assert started.returncode == 0 and started.stdout.startswith("acme."), started
    with tenants.locked.client("operator") as operator:
        for n in (2, 3):
            assert not operator.exists(KEYS.run(f"acme.stolen-{n}"))
        assert not operator.exists(KEYS.run("run-stolen-4"))


def test_acl_sh_refuses_a_tenant_name_that_is_not_safe_in_a_pattern(tmp_path: Path) -> None:
    passwords = {user: "x" for user in USERS}
    for bad in ("Acme", "a*", "a.b", "1acme", "a]"):
        env_passwords = {**passwords, f"submitters_{bad}": "x", f"approvers_{bad}": "x"}
        with pytest.raises(subprocess.CalledProcessError) as error:
            render_acl(env_passwords, tenants=(bad,))
        assert "tenant names" in error.value.stderr, (bad, error.value.stderr)
    rules = tmp_path / "wide.acl"
    rules.write_text("user default off\nuser submitters on resetkeys %R~cg:{p0}:* -@all\n")
    with pytest.raises(subprocess.CalledProcessError) as error:
        render_acl({"submitters": "x", "submitters_acme": "x"}, rules, ("acme",))
    assert "cannot narrow key pattern %R~cg:{p0}:*" in error.value.stderr


def test_a_tenants_patterns_match_no_look_alike_key(tenants: Tenants) -> None:
    """acme's login reads its keys, and no key that merely contains ``acme.``: another
    tenant's run id with ``:acme.`` inside, the deployment's indices, globex's index."""
    look_alikes = [
        ("HGETALL", KEYS.run("globex.x:acme.y")),
        ("HGETALL", KEYS.call("globex.x", "acme.y")),
        ("HGETALL", KEYS.run_index("globex.acme.")),
        ("ZRANGE", KEYS.runs_index(0), 0, -1),
        ("ZRANGE", KEYS.runs_index(0, "globex"), 0, -1),
        ("HGETALL", "cg:acme.x"),
        ("GET", "arq:result:globex.acme.x"),
    ]
    with tenants.locked.client("submitters_acme") as acme:
        assert acme.hgetall(KEYS.run("acme.none")) == {}
        assert acme.zrange(KEYS.runs_index(12, "acme"), 0, -1) == []
        for command in look_alikes:
            with pytest.raises(NoPermissionError, match="no permissions to access one of the"):
                acme.execute_command(*command)
                pytest.fail(f"acme read {command}")


def test_compose_renders_the_users_of_the_tenants_the_tests_lock_down() -> None:
    compose = (DEPLOY.parents[1] / "docker-compose.yml").read_text()
    assert f"CALLGATE_TENANTS: ${{CALLGATE_TENANTS-{' '.join(TENANTS)}}}" in compose
    for user in TENANT_USERS:
        name = f"REDIS_{user.upper()}_PASSWORD"
        assert f"{name}: ${{{name}:-}}" in compose, f"the redis service passes {name}"


def _notes_written(tenants: Tenants, title: str) -> int:
    """How many write requests the notes service received for notes titled ``title`` (its
    own count; the scenario titles a note with the run's input)."""
    url = f"{tenants.system.env['NOTES_URL']}/_stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return int(json.loads(answer.read())["write_requests"].get(title, 0))


def test_the_documented_logins_take_a_run_to_one_approved_write_and_cancel_another(
    tenants: Tenants,
) -> None:
    """The single-tenant path under the untenanted logins README documents: `callgate run`
    (``submitters``, the local submitting service) pauses for an editor; `runs` and `view`
    (``submitters``) show it; carol's `approve` (``approvers``) sends the note exactly once;
    a second run is cancelled under ``approvers``."""
    run = (
        "run",
        "--api",
        "openai-chat",
        "--model",
        "notes-agent",
        "--tools",
        "search_notes,add_note",
        "--wait",
        "--json",
        "--timeout",
        "30",
        "--identity",
    )
    paused = tenants.callgate(
        "submitters", None, *run, '{"user": "dora"}', "--input", "standup of dora"
    )
    assert paused.returncode == 4, paused.stderr  # paused waiting for a person
    run_id = orjson.loads(paused.stdout)["run_id"]
    listed = tenants.callgate("submitters", None, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert run_id in [row["run_id"] for row in orjson.loads(listed.stdout)]
    shown = tenants.callgate("submitters", None, "view", run_id, "--json")
    assert shown.returncode == 0 and orjson.loads(shown.stdout)["status"] == "paused_approval"
    inbox = tenants.callgate("approvers", None, "approvals", "--json")
    [approval] = [a for a in orjson.loads(inbox.stdout) if a["run_id"] == run_id]
    approved = tenants.callgate(
        "approvers", None, "approve", approval["approval_id"], "--as", "carol"
    )
    assert approved.returncode == 0, approved.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        shown = tenants.callgate("submitters", None, "view", run_id, "--json")
        if orjson.loads(shown.stdout)["status"] == "completed":
            break
        time.sleep(0.2)
    assert orjson.loads(shown.stdout)["status"] == "completed", shown.stdout
    assert _notes_written(tenants, "standup of dora") == 1

    second = tenants.callgate(
        "submitters", None, *run, '{"user": "alice"}', "--input", "standup of erin"
    )
    assert second.returncode == 4, second.stderr
    second_id = orjson.loads(second.stdout)["run_id"]
    refused = tenants.callgate("approvers", None, "cancel", second_id, "--as", "bob")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused  # not bob's
    cancelled = tenants.callgate("approvers", None, "cancel", second_id, "--as", "alice")
    assert cancelled.returncode == 0, cancelled.stderr
    shown = tenants.callgate("submitters", None, "view", second_id, "--json")
    assert orjson.loads(shown.stdout)["status"] == "cancelled"
    assert _notes_written(tenants, "standup of erin") == 0
