"""`callgate serve` beside a whole deployment, for the HTTP API tests: the server runs as its own
process (started the way `callgate dev` starts it), with a delegate key ``api`` that may sign for
carol, alice, bob and the operator — not dave —, an identity provider in the trust file, and
bearer tokens for anyone in the keyring."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.deployment import signer_of
from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import public_key_text
from callgate.auth.tokens import ACCESS_TYPE, Signer, sign_access
from callgate.ops.dev_cli import start_api
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.e2e.people import deployment

API_SIGNS_FOR = ["carol", "alice", "bob", "operator"]
IDP = "https://idp.example"
IDP_KEY = Ed25519PrivateKey.generate()
ISSUERS = {
    IDP: {
        "audience": "callgate",
        "public_keys": [public_key_text(IDP_KEY)],
        "algorithms": ["EdDSA"],
    }
}
"""An identity provider the API tests' trust file lists."""
NARROW_KEY = Ed25519PrivateKey.generate()
NARROW = {"narrow": {"public_key": public_key_text(NARROW_KEY), "users": ["bob"]}}
"""A submitting service that may vouch for bob only."""
API_ENV = {"CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.2, 0.4]", "CALLGATE_API_SSE_BLOCK_MS": "300"}
MORE_TRUST = {"issuers": ISSUERS, "submitters": NARROW}


def api_deployment(
    redis_server: EmbeddedRedis,
    home: Path,
    services: tuple[str, ...],
    env: Mapping[str, str] | None = None,
    more_trust: Mapping[str, Mapping[str, Any]] | None = None,
    scenarios: tuple[Path, ...] = (),
) -> Iterator[LocalSystem]:
    """Every worker, the scripted model, ``services`` and the API server (``urls["api"]``), on
    a copy of the session's trust file with ``more_trust`` (section → entries) added."""
    keyring = LocalKeyring(home)
    keyring.ensure({}, {"api": API_SIGNS_FOR})  # makes the key; the entry is set below
    document = json.loads(keyring.trust_file.read_text())
    # Whoever made the session keyring's `api` entry first (a benchmark, another module), this
    # deployment's trust says exactly whom it signs for.
    api = {"public_key": public_key_text(keyring.signer("api").key), "signs_for": API_SIGNS_FOR}
    for section, entries in {**(more_trust or {}), "delegates": {"api": api}}.items():
        document[section] = {**document.get(section, {}), **entries}
    copy = home / f"trust-{uuid.uuid4().hex[:8]}.json"
    copy.write_text(json.dumps(document))
    env = {**(env or {}), "CALLGATE_TRUST_FILE": str(copy)}
    for system in deployment(redis_server, services, env, scenarios):
        start_api(system)
        yield system


def idp_token(key: Ed25519PrivateKey, issuer: str, user: str, audience: str = "callgate") -> str:
    """An identity provider's JWT for ``user`` (its roles claim says admin: it must not count)."""
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": user,
        "roles": ["admin"],
        "iat": now,
        "exp": now + 300,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, key, algorithm="EdDSA")


def token(system: LocalSystem, name: str, ttl_s: float = 120) -> str:
    """A bearer token for ``name``, as `callgate keys token NAME` prints it."""
    return sign_access(signer_of(system.settings, name), ttl_s)


def expired_token(system: LocalSystem, name: str) -> str:
    """``name``'s own key, a token that expired an hour ago."""
    now = int(time.time())
    claims = {"sub": name, "typ": ACCESS_TYPE, "iat": now - 4000, "exp": now - 3600, "jti": "x"}
    return jwt.encode(
        claims, signer_of(system.settings, name).key, algorithm="EdDSA", headers={"kid": name}
    )


def foreign_token(name: str) -> str:
    """A token naming ``name`` but signed by a key the deployment does not know."""
    now = int(time.time())
    claims = {"sub": name, "typ": ACCESS_TYPE, "iat": now, "exp": now + 60, "jti": "y"}
    return jwt.encode(
        claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": name}
    )


def bad_tokens(system: LocalSystem, name: str) -> dict[str, dict[str, Any]]:
    """The headers of every caller the deployment cannot verify (each must get a 401)."""
    return {
        "none": {},
        "malformed": {"Authorization": "Bearer not-a-jwt"},
        "not bearer": {"Authorization": f"Basic {token(system, name)}"},
        "expired": {"Authorization": f"Bearer {expired_token(system, name)}"},
        "foreign key": {"Authorization": f"Bearer {foreign_token(name)}"},
    }


def auth(system: LocalSystem, name: str) -> dict[str, str]:
    if name == "narrow":
        return {"Authorization": f"Bearer {sign_access(Signer('narrow', NARROW_KEY))}"}
    return {"Authorization": f"Bearer {token(system, name)}"}
