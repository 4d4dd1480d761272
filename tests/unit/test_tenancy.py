"""Tenancy's pure parts: whose run ids a run may take, and the key kinds acl.sh narrows."""

from __future__ import annotations

import inspect
import re
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from callgate.auth.admission import admit
from callgate.auth.keys import public_key_text
from callgate.auth.tenancy import check_tenancy, prefix_tenant, tenants
from callgate.auth.tokens import Signer, sign_submission
from callgate.auth.trust import TrustConfig
from callgate.config import Settings
from callgate.errors import AuthError
from callgate.jobs import StartJob
from callgate.keys import Keys
from callgate.runspec import parse_spec, with_run_id

ACL_SH = Path(__file__).resolve().parents[2] / "deploy" / "redis" / "acl.sh"


def trust(**attributes: list[str]) -> TrustConfig:
    key = public_key_text(Ed25519PrivateKey.generate())
    return TrustConfig.model_validate(
        {
            "submitters": {
                name: {"public_key": key, "grants": ["*"], "attributes": {"tenant": values}}
                for name, values in attributes.items()
            }
        }
    )


TRUST = trust(acme_desk=["acme"], globex_desk=["globex", "*"])


def test_the_tenants_are_the_values_submitters_may_assert() -> None:
    assert tenants(TRUST) == ["acme", "globex"]


@pytest.mark.parametrize(
    ("identity", "run_id"),
    [
        ({"user": "alice", "tenant": "acme"}, "acme.1"),
        ({"user": "bob", "tenant": "globex"}, "globex.x:acme.y"),
        ({"user": "carl", "tenant": "initech"}, "initech.7"),  # granted by "*": its own prefix
        ({"user": "dora"}, "run-1"),
        ({"user": "dora"}, "other.1"),  # a prefix no tenant has
    ],
)
def test_a_run_takes_a_run_id_named_for_its_tenant(identity: dict[str, Any], run_id: str) -> None:
    check_tenancy(TRUST, identity, run_id)


@pytest.mark.parametrize(
    ("identity", "run_id", "reason"),
    [
        ({"user": "bob", "tenant": "globex"}, "acme.1", "needs a run id starting 'globex.'"),
        ({"user": "bob", "tenant": "globex"}, "globex", "needs a run id starting 'globex.'"),
        ({"user": "bob", "tenant": "globex"}, "globexx.1", "needs a run id starting 'globex.'"),
        ({"user": "dora"}, "acme.1", "belong to tenant acme"),
        ({"user": "dora", "tenant": "Acme"}, "Acme.1", "not a tenant name"),
        ({"user": "dora", "tenant": "a*"}, "a*.1", "not a tenant name"),
        ({"user": "dora", "tenant": ["acme"]}, "acme.1", "not a tenant name"),
    ],
)
def test_any_other_run_id_is_refused(identity: dict[str, Any], run_id: str, reason: str) -> None:
    with pytest.raises(AuthError, match=re.escape(reason)):
        check_tenancy(TRUST, identity, run_id)


def test_the_client_mints_a_tenants_run_id_with_its_prefix() -> None:
    spec = {"api": "openai-chat", "model": "m", "input": "hi"}
    tenanted = with_run_id(parse_spec({**spec, "identity": {"user": "a", "tenant": "acme"}}))
    assert tenanted.run_id is not None and prefix_tenant(tenanted.run_id) == "acme"
    plain = with_run_id(parse_spec({**spec, "identity": {"user": "a"}}))
    assert plain.run_id is not None and plain.run_id.startswith("run-")


def test_a_cli_tenant_setting_is_a_tenant_name() -> None:
    assert Settings(tenant="acme").tenant == "acme"
    with pytest.raises(ValidationError):
        Settings(tenant="acme.*")


def _per_run_kinds() -> set[str]:
    """The kind segment of every key `Keys` builds from a run id (``cg:{p0}:<kind>:<id>…``)."""
    keys, kinds = Keys(), set()
    for name, method in inspect.getmembers(keys, inspect.ismethod):
        params = list(inspect.signature(method).parameters)
        if name.startswith("_") or not params or params[0] != "run_id":
            continue
        key = method("acme.x", *(["1"] * (len(params) - 1)))
        if isinstance(key, str) and "acme.x" in key.split(":", 3)[-1]:
            kinds.add(key.split(":")[2])
    return kinds


def _tenant_indices() -> set[str]:
    """The name of every partition index `Keys` builds a tenant's copy of
    (``cg:{p3}:<index>:acme.``)."""
    keys, names = Keys(), set()
    for name, method in inspect.getmembers(keys, inspect.ismethod):
        if name.startswith("_") or list(inspect.signature(method).parameters) != [
            "partition",
            "tenant",
        ]:
            continue
        whole, copy = method(3, None), method(3, "acme")
        assert copy == f"{whole}:acme.", name
        names.add(whole.removeprefix("cg:{p3}:"))
    return names


def _acl_sh_list(name: str) -> set[str]:
    found = re.search(rf"^{name}='([^']*)'$", ACL_SH.read_text(), re.MULTILINE)
    assert found is not None, name
    return set(found[1].split())


def test_acl_sh_narrows_every_per_run_key_kind_of_callgate_keys() -> None:
    """A kind acl.sh did not list would be unreadable by a tenant's login; one it listed that
    Keys no longer builds is dead weight: the two lists are one.  So are the tenant's copies
    of the partition indices (runs, pending approvals, unresolved calls)."""
    assert _acl_sh_list("RUN_KINDS") == _per_run_kinds()
    assert _acl_sh_list("TENANT_INDICES") == _tenant_indices()
    assert _tenant_indices() == {"runs", "approvals:pending", "calls:unresolved"}
    assert Keys().runs_index(3, "acme") == "cg:{p3}:runs:acme."


def _desk_trust(issuer_key: Ed25519PrivateKey, desk_key: Ed25519PrivateKey) -> TrustConfig:
    return TrustConfig.model_validate(
        {
            "submitters": {
                "acme_desk": {
                    "public_key": public_key_text(desk_key),
                    "grants": ["*"],
                    "attributes": {"tenant": ["acme"]},
                }
            },
            "issuers": {
                "https://idp.test": {
                    "audience": "callgate",
                    "public_keys": [public_key_text(issuer_key)],
                }
            },
        }
    )


def _job(
    desk_key: Ed25519PrivateKey, run_id: str, identity: dict[str, Any], id_token: str | None = None
) -> StartJob:
    spec = {
        "run_id": run_id,
        "api": "openai-responses",
        "model": "m",
        "input": "hi",
        "identity": identity,
    }
    token = sign_submission(Signer("acme_desk", desk_key), run_id=run_id, spec=spec)
    return StartJob(spec=spec, token=token, identity_token=id_token)


def _id_token(issuer_key: Ed25519PrivateKey, user: str) -> str:
    now = int(time.time())
    claims = {
        "iss": "https://idp.test",
        "aud": "callgate",
        "sub": user,
        "iat": now,
        "exp": now + 60,
        "jti": f"j-{user}-{now}",
    }
    return jwt.encode(claims, issuer_key, algorithm="EdDSA")


def test_a_tenants_service_cannot_start_a_run_outside_every_tenant() -> None:
    """acme's service starting an untenanted run would put acme's data where no acme login
    reads it and every untenanted one does: refused, on both admission paths."""
    issuer_key, desk_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trust = _desk_trust(issuer_key, desk_key)
    admitted = admit(
        _job(desk_key, "acme.1", {"user": "alice", "tenant": "acme"}),
        "acme.1",
        trust,
        now=time.time(),
        token_max_age_s=600,
    )
    assert admitted.identity["tenant"] == "acme"
    with pytest.raises(AuthError, match=re.escape("name the tenant as identity.tenant")):
        admit(
            _job(desk_key, "run-1", {"user": "alice"}),
            "run-1",
            trust,
            now=time.time(),
            token_max_age_s=600,
        )
    with pytest.raises(AuthError, match=re.escape("name the tenant as identity.tenant")):
        admit(
            _job(desk_key, "run-2", {}, _id_token(issuer_key, "alice")),
            "run-2",
            trust,
            now=time.time(),
            token_max_age_s=600,
        )


def test_an_issuers_user_runs_under_the_tenant_its_service_may_name() -> None:
    issuer_key, desk_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trust = _desk_trust(issuer_key, desk_key)
    job = _job(desk_key, "acme.2", {"tenant": "acme"}, _id_token(issuer_key, "alice"))
    admitted = admit(job, "acme.2", trust, now=time.time(), token_max_age_s=600)
    assert admitted.identity == {"user": "alice", "roles": [], "tenant": "acme"}
    job = _job(desk_key, "globex.2", {"tenant": "globex"}, _id_token(issuer_key, "bob"))
    with pytest.raises(AuthError, match="may not assert tenant = 'globex'"):
        admit(job, "globex.2", trust, now=time.time(), token_max_age_s=600)
