"""Attacks on run admission, against a real private Redis and a real arq ingress (burst).

Each test enqueues what an attacker could, and checks the ingress refuses it and leaves
nothing for that run id (no run record, history, runs-index entry, event stream or turn-1
message on the turns stream), with a control the same deployment accepts:

1. a spec that names code: an acceptance validator ``builtins:exec``, a validator nobody
   registered, a ``tool_modules`` field naming an importable module, an allow-list entry
   ``os:system`` — refused by the client and, properly signed, by the ingress; nothing is
   imported or run (a marker file the code would write stays absent);
2. self-declared roles: a submitter vouches only within its trust entry's ``grants`` (and
   ``attributes``, for identity fields besides user and roles); an
   identity token's roles are the deployment's mapping of its claim, never the spec's, and a
   spec naming another user than the token is refused (an identity token's replay, lifetime
   and need of a submitter's signature: test_identity_token_replay.py);
3. a bare spec as plain arq enqueues it (callgate's JSON serializer), or one with neither a
   signature nor a token: refused, the arq result saying why in readable JSON;
4. a spec changed after signing (identity swapped, input changed), or a signature reused for
   another run;
5. a signature by a key the deployment does not know for a submitter: a new key under a known
   submitter's name, an unknown name, a person's own key, an unsigned ``alg: none`` token.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
import redis.asyncio as aioredis
from arq.connections import ArqRedis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import public_key_text
from callgate.auth.tenancy import run_id_prefix
from callgate.auth.tokens import Signer, sign_submission, spec_digest
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.envelopes import TurnRequest, decode
from callgate.errors import JobFailedError, RunSpecError
from callgate.jobs import START_RUN, StartJob
from callgate.keys import Keys
from tests.integration.helpers import drain, new_run_id
from tests.seed import run_spec, signed_job

ISSUER = "https://idp.callgate.test"
AUDIENCE = "callgate-tests"


def spec(run_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """A valid spec with no allow-list (every registered tool), acting for alice."""
    return run_spec(run_id, **{"allowed_tools": None, **changes})


async def enqueue(pool: ArqRedis, job: Any, run_id: str) -> None:
    assert await pool.enqueue_job(START_RUN, job, _job_id=run_id) is not None


async def assert_nothing_created(redis: aioredis.Redis, settings: Settings, run_id: str) -> None:
    """No key of the deployment names the run, no index lists it, no turn message asks for it."""
    keys = Keys(settings.key_prefix, settings.partitions)
    assert not await redis.exists(keys.run(run_id), keys.events(run_id), keys.history(run_id))
    named = [k async for k in redis.scan_iter(match=f"{settings.key_prefix}:*{run_id}*")]
    assert named == []
    assert await redis.zscore(keys.runs_index(keys.partition(run_id)), run_id) is None
    entries = await redis.xrange(keys.run_stream("turns", run_id))
    turns = [decode(fields[b"d"]) for _, fields in entries]
    assert [m for m in turns if isinstance(m, TurnRequest) and m.run_id == run_id] == []


async def refusal(redis: aioredis.Redis, settings: Settings, run_id: str) -> str:
    """The failed job's reason, read as any language would: arq's result is JSON."""
    await assert_nothing_created(redis, settings, run_id)
    raw = await redis.get(f"arq:result:{run_id}")
    assert raw is not None, f"job {run_id} left no result"
    result = orjson.loads(raw)
    assert result["s"] is False, f"job {run_id} succeeded: {result['r']}"
    return f"{result['r']['error']}: {result['r']['message']}"


async def assert_created(client: CallgateClient, run_id: str) -> dict[str, Any]:
    """The control: the deployment does start this run; its verified identity and voucher."""
    run = await client.run(run_id)
    assert run is not None, f"the control run {run_id} was not created"
    return {"identity": run.identity, "vouched_by": run.vouched_by}


# -- 1. a spec names code ---------------------------------------------------------------------


def code_naming_specs(run_id: str, module: str, marker: Path) -> dict[str, dict[str, Any]]:
    """Specs that name code (expected refusal → spec); each input is Python writing ``marker``."""
    payload = f"open({str(marker)!r}, 'w').write('code ran')"
    return {
        "never code to import": spec(
            run_id, input=payload, acceptance={"validator": "builtins:exec"}
        ),
        f"{module!r} is not a registered validator": spec(
            run_id, input=payload, acceptance={"validator": module}
        ),
        "tool_modules: a run may not name code": spec(run_id, input=payload, tool_modules=[module]),
        "os:system not registered in this deployment": spec(
            run_id, input=payload, allowed_tools=["os:system"]
        ),
    }


@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module that writes a marker file when imported, and the marker."""
    name = f"cg_evil_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "code-ran.marker"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "TOOLS: list[object] = []\nACCEPTANCE = {'" + name + "': exec}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, marker


async def test_client_refuses_a_spec_that_names_code(
    settings: Settings, client: CallgateClient, redis: aioredis.Redis, evil_module: tuple[str, Path]
) -> None:
    module, marker = evil_module
    refused_here = new_run_id()
    specs = code_naming_specs(refused_here, module, marker)
    for expected in ("never code to import", "tool_modules: a run may not name code"):
        with pytest.raises(RunSpecError, match=expected):
            await client.submit(specs[expected])
    assert not await redis.exists(f"arq:job:{refused_here}"), "refused before enqueueing"
    await assert_nothing_created(redis, settings, refused_here)
    # The client does not know the ingress's registry: the ingress refuses the rest.
    unregistered = [specs[k] for k in specs if "registered" in k]
    run_ids = [await client.submit({**s, "run_id": new_run_id()}) for s in unregistered]
    assert await drain(settings) == (0, len(run_ids))
    for run_id in run_ids:
        await assert_nothing_created(redis, settings, run_id)
        with pytest.raises(JobFailedError, match=r"not (a )?registered"):
            await client.wait(run_id, timeout_s=2)
    assert not marker.exists() and module not in sys.modules


async def test_signed_jobs_that_name_code_are_refused_and_run_nothing(
    settings: Settings,
    pool: ArqRedis,
    client: CallgateClient,
    redis: aioredis.Redis,
    evil_module: tuple[str, Path],
) -> None:
    module, marker = evil_module
    refused: dict[str, str] = {}
    for expected, bad in code_naming_specs("", module, marker).items():
        run_id = new_run_id()
        await enqueue(pool, signed_job({**bad, "run_id": run_id}, run_id), run_id)
        refused[run_id] = expected
    control = new_run_id()
    await enqueue(pool, signed_job(spec(control), control), control)
    assert await drain(settings) == (1, len(refused))
    for run_id, expected in refused.items():
        assert expected in await refusal(redis, settings, run_id)
    assert (await assert_created(client, control))["vouched_by"] == "service:local"
    assert not marker.exists() and module not in sys.modules


# -- 2. self-declared roles -------------------------------------------------------------------


def narrow_deployment(settings: Settings, tmp_path: Path) -> tuple[Settings, Signer, Any]:
    """A deployment whose one submitter may grant only ``requester`` (and tenant ``acme``),
    and one identity provider whose ``lead`` claim maps to ``events-lead``; its settings, that
    submitter's signer and the provider's private key."""
    submitter, idp = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trust = {
        "submitters": {
            "frontdesk": {
                "public_key": public_key_text(submitter),
                "grants": ["requester"],
                "attributes": {"tenant": ["acme"]},
            }
        },
        "issuers": {
            ISSUER: {
                "audience": AUDIENCE,
                "public_keys": [public_key_text(idp)],
                "algorithms": ["EdDSA"],
                "role_map": {"lead": "events-lead"},
            }
        },
    }
    path = tmp_path / "narrow-trust.json"
    path.write_text(json.dumps(trust))
    narrow = settings.model_copy(update={"trust_file": path})
    assert narrow.trust_path == path
    return narrow, Signer("frontdesk", submitter), idp


def id_token(key: Any, user: str, roles: list[str], audience: str = AUDIENCE) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": audience,
        "sub": user,
        "roles": roles,
        "iat": now,
        "exp": now + 300,
    }
    return jwt.encode(claims, key, algorithm="EdDSA")


def submitted(signer: Signer, data: dict[str, Any]) -> dict[str, Any]:
    token = sign_submission(signer, run_id=data["run_id"], spec=data)
    return StartJob(spec=data, token=token).model_dump(exclude_none=True)


def with_id_token(signer: Signer, data: dict[str, Any], token: str) -> dict[str, Any]:
    """A job acting for the identity token's user, signed by ``signer`` as it must be."""
    signature = sign_submission(signer, run_id=data["run_id"], spec=data)
    return StartJob(spec=data, token=signature, identity_token=token).model_dump(exclude_none=True)


async def test_a_submitter_vouches_only_within_its_trust_entry(
    settings: Settings,
    pool: ArqRedis,
    client: CallgateClient,
    redis: aioredis.Redis,
    tmp_path: Path,
) -> None:
    """Roles it may not grant are refused; so are identity fields besides user and roles (they
    reach every tool hook) that its entry does not list, or lists with other values."""
    narrow, frontdesk, _ = narrow_deployment(settings, tmp_path)
    claims = {
        "may not grant 'events-lead'": {"user": "mallory", "roles": ["events-lead"]},
        "may not grant 'operator'": {"user": "mallory", "roles": ["requester", "operator"]},
        "roles must be a list of strings": {"user": "mallory", "roles": "events-lead"},
        "may not assert tenant = 'globex'": {"user": "mallory", "tenant": "globex"},
        "may not assert the identity field 'clearance'": {
            "user": "mallory",
            "clearance": "top-secret",
        },
    }
    refused = {new_run_id(): (reason, who) for reason, who in claims.items()}
    for run_id, (_, who) in refused.items():
        await enqueue(pool, submitted(frontdesk, spec(run_id, identity=who)), run_id)
    control = f"{run_id_prefix('acme')}{new_run_id()}"  # a tenant's run carries its name
    mallory = {"user": "mallory", "roles": ["requester"], "tenant": "acme"}
    await enqueue(pool, submitted(frontdesk, spec(control, identity=mallory)), control)
    assert await drain(narrow) == (1, len(refused))
    for run_id, (reason, _) in refused.items():
        assert reason in await refusal(redis, narrow, run_id)
    assert await assert_created(client, control) == {
        "identity": mallory,
        "vouched_by": "service:frontdesk",
    }


async def test_an_identity_tokens_roles_are_the_deployments_mapping_of_its_claim(
    settings: Settings,
    pool: ArqRedis,
    client: CallgateClient,
    redis: aioredis.Redis,
    tmp_path: Path,
) -> None:
    narrow, frontdesk, idp = narrow_deployment(settings, tmp_path)
    alice = id_token(idp, "alice", ["lead", "root", "operator"])
    # The spec claims operator; the token's claim maps to events-lead only.  The tenant is the
    # submitting service's to name (within its entry), as a run of a tenant's service must.
    mapped = f"{run_id_prefix('acme')}{new_run_id()}"
    claimed = {"user": "alice", "roles": ["operator"], "tenant": "acme"}
    await enqueue(pool, with_id_token(frontdesk, spec(mapped, identity=claimed), alice), mapped)
    stranger = Ed25519PrivateKey.generate()
    refused = {  # reason → (the spec's identity, the token)
        "the spec names 'mallory', the token 'alice'": ({"user": "mallory"}, alice),
        "signature does not verify": (None, id_token(stranger, "alice", ["lead"])),
        "wrong audience": (None, id_token(idp, "alice", ["lead"], "elsewhere")),
    }
    run_ids = {new_run_id(): reason for reason in refused}
    for run_id, reason in run_ids.items():
        who, token = refused[reason]
        await enqueue(pool, with_id_token(frontdesk, spec(run_id, identity=who), token), run_id)
    assert await drain(narrow) == (1, len(run_ids))
    for run_id, reason in run_ids.items():
        assert reason in await refusal(redis, narrow, run_id)
    assert await assert_created(client, mapped) == {
        "identity": {"user": "alice", "roles": ["events-lead"], "tenant": "acme"},
        "vouched_by": f"issuer:{ISSUER}",
    }


# -- 3. no signature at all -------------------------------------------------------------------


async def test_a_bare_spec_is_refused_and_the_result_says_why(
    settings: Settings, pool: ArqRedis, client: CallgateClient, redis: aioredis.Redis
) -> None:
    bare, unsigned, control = new_run_id(), new_run_id(), new_run_id()
    operator = {"user": "mallory", "roles": ["operator"]}
    await enqueue(pool, spec(bare, identity=operator), bare)  # exactly what plain arq sends
    await enqueue(pool, {"spec": spec(unsigned, identity=operator)}, unsigned)
    await enqueue(pool, signed_job(spec(control), control), control)
    assert await drain(settings) == (1, 2)
    for run_id in (bare, unsigned):
        reason = await refusal(redis, settings, run_id)
        assert reason.startswith("AuthError: not trusted: unsigned"), reason
        with pytest.raises(JobFailedError, match="unsigned"):
            await client.status(run_id)
    await assert_created(client, control)


# -- 4. changed after signing -----------------------------------------------------------------


async def test_a_spec_changed_after_signing_is_refused(
    settings: Settings, pool: ArqRedis, client: CallgateClient, redis: aioredis.Redis
) -> None:
    swapped, edited, elsewhere, control = (new_run_id() for _ in range(4))
    job = signed_job(spec(swapped), swapped)
    mallory = {"user": "mallory", "roles": ["events-lead"]}  # "local" may grant it, if it signs
    await enqueue(pool, {**job, "spec": {**job["spec"], "identity": mallory}}, swapped)
    job = signed_job(spec(edited), edited)
    await enqueue(pool, {**job, "spec": {**job["spec"], "input": "Cancel every booking."}}, edited)
    # A signature over a spec without a run id, for one job id, replayed under another.
    await enqueue(pool, signed_job(spec(), control), elsewhere)
    await enqueue(pool, signed_job(spec(), control), control)
    assert await drain(settings) == (1, 3)
    assert "spec changed after signing" in await refusal(redis, settings, swapped)
    assert "spec changed after signing" in await refusal(redis, settings, edited)
    assert "signed for another run" in await refusal(redis, settings, elsewhere)
    assert (await assert_created(client, control))["identity"] == {"user": "alice"}


# -- 5. a key the deployment does not know ----------------------------------------------------


def none_alg_token(data: dict[str, Any], key_id: str) -> str:
    """An unsigned JWT (``alg: none``) with every claim a submission needs."""
    now = int(time.time())
    claims = {
        "sub": key_id,
        "run": data["run_id"],
        "typ": "callgate.submission",
        "jti": "x",
        "spec": spec_digest(data),
        "iat": now,
        "exp": now + 60,
    }
    return jwt.encode(claims, "", algorithm="none", headers={"kid": key_id})


async def test_a_job_signed_by_a_key_the_deployment_does_not_know_is_refused(
    settings: Settings,
    pool: ArqRedis,
    client: CallgateClient,
    redis: aioredis.Redis,
    callgate_home: Path,
) -> None:
    stranger = Ed25519PrivateKey.generate()
    carol = LocalKeyring(callgate_home).signer("carol")  # a person who holds events-lead
    mallory = {"user": "mallory", "roles": ["events-lead"]}
    attempts: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "signature does not verify": lambda d: submitted(Signer("local", stranger), d),
        "unknown key 'intruder'": lambda d: submitted(Signer("intruder", stranger), d),
        "key 'carol' is not a submitter": lambda d: submitted(carol, d),
        "algorithm not allowed": lambda d: StartJob(
            spec=d, token=none_alg_token(d, "local")
        ).model_dump(exclude_none=True),
    }
    run_ids = {new_run_id(): reason for reason in attempts}
    for run_id, reason in run_ids.items():
        await enqueue(pool, attempts[reason](spec(run_id, identity=mallory)), run_id)
    control = new_run_id()
    await enqueue(pool, signed_job(spec(control, identity=mallory), control), control)
    assert await drain(settings) == (1, len(run_ids))
    for run_id, reason in run_ids.items():
        assert reason in await refusal(redis, settings, run_id)
    assert (await assert_created(client, control))["identity"] == mallory
