"""What a holder of the ``submitters`` login can try on other submitters' runs (issue #31, attacks
1 and 2), on a Redis locked down with the deployment's users.acl (rendered by acl.sh), every
worker running as ``workers`` and the real ingress (burst; serving, for its queue sweep):

1. overwrite, expire or delete another's queued job: Redis refuses every command that could;
   the victim's run runs as submitted;
2. re-score another's queue entry into the far future: the ingress's sweep puts it back;
3. take a run id before its owner submits: ``submit`` or ``wait`` fails loudly, never handing
   the owner the taker's run;
4. lift an end user's identity token: no kept result holds it, and it starts nothing without a
   submitter's signature, a second time, or when it lives longer than the cap;
5. the legitimate path under the same login: submit (with a signature, an identity token, a
   foreign client's raw job), wait, view and ``callgate runs``, with nothing refused.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import new_private_key, public_key_text, write_private_key
from callgate.auth.tokens import Signer, sign_submission
from callgate.client import CallgateClient
from callgate.clock import now_ms
from callgate.config import Settings
from callgate.errors import SpecConflictError
from callgate.jobs import START_RUN, StartJob
from callgate.keys import Keys
from callgate.ops.cli import main as cli_main
from callgate.ops.system import LocalSystem, SystemSpec
from tests.integration.helpers import drain, new_run_id
from tests.integration.redis_lockdown import (
    PREFIX,
    TRAVEL_RUN,
    LockedRedis,
    assert_travel_completed,
    locked_redis,
)
from tests.integration.test_raw_enqueue import NO_CALLGATE, SUBMITTER
from tests.integration.test_redis_acl import command_refused

ISSUER = "https://idp.submitters.test"
AUDIENCE = "callgate-submitters"
QUEUE = f"{PREFIX}:arq"
YEAR_MS = 365 * 86_400_000


@dataclass
class Deployment:
    """The locked-down Redis, the workers, and the trust file they read."""

    locked: LockedRedis
    system: LocalSystem
    home: Path
    idp: Ed25519PrivateKey

    def settings(self, login: str = "submitters", submitter: str = "local") -> Settings:
        """``login``'s settings, signing as ``submitter`` (a key of this deployment's home)."""
        return self.locked.settings(login).model_copy(
            update={
                "home": self.home,
                "trust_file": self.home / "trust.json",
                "submitter": submitter,
                "signing_key": self.home / "keys" / f"{submitter}.pem",
                "tool_modules": self.system.settings.tool_modules,
            }
        )

    def signer(self, name: str) -> Signer:
        return LocalKeyring(self.home).signer(name)

    async def ingress_burst(self) -> tuple[int, int]:
        """The ingress's public queue, run once (jobs done, jobs failed)."""
        return await drain(self.settings("workers"))

    def attacker(self) -> redis.Redis:
        return self.locked.client("submitters")


def trusting_home(home: Path) -> Ed25519PrivateKey:
    """The local keyring, plus a second submitting service (``intruder``, the attacker's own
    key, trusted like any submitter) and an identity provider; the provider's key."""
    keyring = LocalKeyring(home)
    keyring.ensure()
    intruder, idp = new_private_key(), new_private_key()
    write_private_key(keyring.key_path("intruder"), intruder)
    document = json.loads(keyring.trust_file.read_text())
    document["submitters"]["intruder"] = {"public_key": public_key_text(intruder), "grants": ["*"]}
    document.setdefault("issuers", {})[ISSUER] = {
        "audience": AUDIENCE,
        "public_keys": [public_key_text(idp)],
        "algorithms": ["EdDSA"],
        "role_map": {"lead": "events-lead"},
    }
    keyring.trust_file.write_text(json.dumps(document))
    return idp


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("submitters-home")
    idp = trusting_home(home)
    with locked_redis(tmp_path_factory.mktemp("submitters-redis")) as locked:
        spec = SystemSpec(
            services=("travel",), scripted_model=True, redis_url=locked.url("workers"),
            key_prefix=PREFIX, replicas={"ingress": 0, "reconciler": 0}, grace_s=3.0,
            env={"CALLGATE_HOME": str(home), "CALLGATE_TRUST_FILE": str(home / "trust.json")},
        )  # fmt: skip
        with LocalSystem(spec) as system:
            yield Deployment(locked, system, home, idp)


@contextmanager
def serving_ingress(deployment: Deployment, log: Path) -> Iterator[None]:
    """``python -m callgate.services.ingress`` serving (its sweeps on), until the block ends."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "callgate.services.ingress"],
            env=deployment.system.env,
            stdout=out,
            stderr=out,
        )
        try:
            yield
        finally:
            process.terminate()
            process.wait(timeout=15)


def travel(run_id: str, **changes: Any) -> dict[str, Any]:
    return {**TRAVEL_RUN, "run_id": run_id, **changes}


def id_token(deployment: Deployment, *, issued_s_ago: int = 0, lifetime_s: int = 300) -> str:
    """alice's token from the identity provider, with a fresh ``jti``."""
    iat = int(time.time()) - issued_s_ago
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "roles": ["lead"],
        "iat": iat,
        "exp": iat + lifetime_s,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, deployment.idp, algorithm="EdDSA")


def start_job(
    spec: dict[str, Any], signer: Signer | None, identity_token: str | None = None
) -> dict[str, Any]:
    token = None if signer is None else sign_submission(signer, run_id=spec["run_id"], spec=spec)
    job = StartJob(spec=spec, token=token, identity_token=identity_token)
    return job.model_dump(exclude_none=True)


def job_value(job: dict[str, Any]) -> bytes:
    return orjson.dumps({"t": 1, "f": START_RUN, "a": [job], "k": {}, "et": now_ms()})


def enqueue_raw(client: redis.Redis, job: dict[str, Any]) -> None:
    """Enqueue as the contract says (callgate.jobs), with the submitters login."""
    run_id = job["spec"]["run_id"]
    with client.pipeline(transaction=True) as pipe:
        pipe.setnx(f"arq:job:{run_id}", job_value(job))
        pipe.zadd(QUEUE, {run_id: now_ms()})
        assert pipe.execute()[0], f"a job under {run_id} exists"


def refusal(client: redis.Redis, run_id: str) -> str:
    """Why the job under ``run_id`` failed, read as a submitter; no run was created."""
    assert not client.exists(Keys(PREFIX).run(run_id)), f"run {run_id} was created"
    result = orjson.loads(client.get(f"arq:result:{run_id}") or b"null")
    assert result is not None and result["s"] is False, result
    return str(result["r"]["message"])


# -- 1. overwrite -----------------------------------------------------------------------------


async def test_a_queued_job_cannot_be_overwritten_expired_or_deleted(
    deployment: Deployment,
) -> None:
    run_id = new_run_id()
    async with CallgateClient(deployment.settings()) as victim:
        assert await victim.submit(travel(run_id)) == run_id
        mallory = {"user": "mallory", "roles": ["events-lead"]}
        forged = job_value(
            start_job(
                travel(run_id, input="Cancel every booking.", identity=mallory),
                deployment.signer("intruder"),
            )
        )
        key = f"arq:job:{run_id}"
        with deployment.attacker() as attacker:
            for command in (
                ("SET", key, forged),
                ("PSETEX", key, 60_000, forged),
                ("SETEX", key, 60, forged),
                ("GETSET", key, forged),
                ("PEXPIRE", key, 1),
                ("EXPIRE", key, 1),
                ("DEL", key),
                ("UNLINK", key),
                ("GETDEL", key),
                ("RENAME", key, f"{key}x"),
                ("APPEND", key, "x"),
                ("SETRANGE", key, 0, forged),
            ):
                command_refused(attacker, *command)
            assert attacker.setnx(key, forged) is False, "create-only: the job stays"
        assert await deployment.ingress_burst() == (1, 0)
        status = await victim.wait(run_id, 30)
    assert (status["status"], status["vouched_by"]) == ("completed", "service:local")
    assert (status["input"], status["identity"]) == (TRAVEL_RUN["input"], {"user": "alice"})
    with deployment.attacker() as attacker:
        assert not attacker.exists(key), "a job key without expiry is deleted when its job ends"


# -- 2. re-score ------------------------------------------------------------------------------


async def test_a_queue_entry_rescored_into_the_future_is_put_back_by_the_ingress(
    deployment: Deployment, tmp_path: Path
) -> None:
    late, early = new_run_id(), new_run_id()
    with deployment.attacker() as attacker:
        attacker.zadd(QUEUE, {early: now_ms() + YEAR_MS})  # before its owner submits
    async with CallgateClient(deployment.settings()) as victim:
        await victim.submit(travel(late))
        await victim.submit(travel(early))  # scored now again by its own enqueue
        with deployment.attacker() as attacker:
            assert attacker.zadd(QUEUE, {late: now_ms() + YEAR_MS}) == 0  # re-scored
        with serving_ingress(deployment, tmp_path / "ingress.log"):
            for run_id in (late, early):
                assert (await victim.wait(run_id, 30))["status"] == "completed"
    with deployment.attacker() as attacker:
        assert attacker.zrange(QUEUE, 0, -1) == []


# -- 3. a run id taken first ------------------------------------------------------------------


async def test_wait_never_returns_a_run_someone_else_started_under_the_id(
    deployment: Deployment,
) -> None:
    taken, squatted = new_run_id(), new_run_id()
    async with CallgateClient(deployment.settings(submitter="intruder")) as intruder:
        await intruder.submit(travel(taken, input="Book a flight to Mars."))
        assert await deployment.ingress_burst() == (1, 0)
        await intruder.submit(travel(squatted))  # the victim's very spec, vouched by another
    async with CallgateClient(deployment.settings()) as victim:
        with pytest.raises(SpecConflictError):  # a result is kept: found at once
            await victim.submit(travel(taken))
        assert await victim.submit(travel(squatted)) == squatted  # still queued: not readable
        assert await deployment.ingress_burst() == (1, 0)
        with pytest.raises(SpecConflictError, match="vouched for by service:intruder"):
            await victim.wait(squatted, 30)
        with pytest.raises(SpecConflictError, match="not the run this client submitted"):
            await victim.wait(squatted, 1)


# -- 4. identity tokens -----------------------------------------------------------------------


async def test_a_lifted_identity_token_starts_nothing(deployment: Deployment) -> None:
    token, local, intruder = (
        id_token(deployment),
        deployment.signer("local"),
        deployment.signer("intruder"),
    )
    first = new_run_id()
    job = start_job(travel(first, identity=None), local, token)
    with deployment.attacker() as attacker:
        enqueue_raw(attacker, job)
        assert await deployment.ingress_burst() == (1, 0)
        kept = attacker.get(f"arq:result:{first}")
        assert kept is not None and token.encode() not in kept and b"identity_token" not in kept
        enqueue_raw(attacker, job)  # the same job again (arq is at-least-once): passes
        assert await deployment.ingress_burst() == (1, 0)
        attempts = {
            "no submitter's signature beside the identity token": (None, id_token(deployment)),
            "identity token already used": (intruder, token),
            "token lifetime exceeds 600 s": (
                intruder,
                id_token(deployment, issued_s_ago=3000, lifetime_s=3300),
            ),
            "token lifetime exceeds 600 s ": (
                intruder,
                id_token(deployment, lifetime_s=10 * YEAR_MS),
            ),
        }
        refused = {new_run_id(): reason for reason in attempts}
        for run_id, reason in refused.items():
            signer, lifted = attempts[reason]
            enqueue_raw(attacker, start_job(travel(run_id, identity=None), signer, lifted))
        assert await deployment.ingress_burst() == (0, len(refused))
        for run_id, reason in refused.items():
            assert reason.strip() in refusal(attacker, run_id)
            assert b"identity_token" not in (attacker.get(f"arq:result:{run_id}") or b"")
    async with CallgateClient(deployment.settings()) as client:
        status = await client.status(first)
    assert status["identity"] == {"user": "alice", "roles": ["events-lead"]}
    assert status["vouched_by"] == f"issuer:{ISSUER}"


# -- 5. the legitimate path -------------------------------------------------------------------


def raw_submit(deployment: Deployment, spec: dict[str, Any]) -> str:
    """A foreign client (redis-py and PyJWT, no callgate) enqueueing as ``submitters``."""
    argv = [
        sys.executable,
        "-c",
        NO_CALLGATE,
        str(SUBMITTER),
        deployment.locked.url("submitters"),
        PREFIX,
        str(deployment.home / "keys" / "local.pem"),
        "local",
        json.dumps(spec),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def refusal_log(locked: LockedRedis) -> list[tuple[str, str, str]]:
    return sorted((e["object"], e["reason"], e["count"]) for e in locked.refusals("submitters"))


async def test_submit_wait_view_and_runs_work_under_the_submitters_login(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = refusal_log(deployment.locked)
    signed, by_token, foreign = new_run_id(), new_run_id(), new_run_id()
    async with CallgateClient(deployment.settings()) as client:
        await client.submit(travel(signed))
        await client.submit(travel(by_token, identity=None), identity_token=id_token(deployment))
        assert raw_submit(deployment, travel(foreign)) == foreign
        assert await deployment.ingress_burst() == (3, 0)
        for run_id in (signed, by_token, foreign):
            assert (await client.wait(run_id, 30))["status"] == "completed"
        assert_travel_completed(await client.view(signed))
    monkeypatch.setenv("REDIS_URL", deployment.locked.url("submitters"))
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", PREFIX)
    capsys.readouterr()
    assert await asyncio.to_thread(cli_main, ["runs", "--json", "--limit", "500"]) == 0
    listed = {row["run_id"] for row in json.loads(capsys.readouterr().out)}
    assert {signed, by_token, foreign} <= listed
    assert refusal_log(deployment.locked) == before, "Redis refused the legitimate path"
