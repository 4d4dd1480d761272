"""Signed submissions, decisions and identity tokens, tested as the attacks they stop.

Real keys, real PyJWT, no mocks.  Our own tokens are signed at the wall clock, so the tests move
``now`` around it; identity-provider tokens are minted here with explicit times.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import RSAAlgorithm
from jwt.utils import base64url_decode, base64url_encode

from callgate.auth.keys import new_private_key, public_key_text
from callgate.auth.tokens import (
    Signer,
    VerifiedDecision,
    VerifiedIdentity,
    check_grant,
    sign,
    sign_decision,
    sign_submission,
    spec_digest,
    verify_decision,
    verify_identity_token,
    verify_submission,
)
from callgate.auth.trust import TrustConfig
from callgate.errors import AuthError
from callgate.tools.canonical import args_hash

DAY_S = 86_400
SPEC = {"task": "book the room", "tools": ["rooms.book"], "identity": {"user": "u1"}}
IDP = "https://idp.example"
ED_IDP = "https://ed.idp.example"
NOW = 1_800_000_000.0


class World:
    """One deployment: its private keys (as the signers hold them) and its trust config."""

    def __init__(self, folder: Path) -> None:
        names = ("billing", "partner", "carol", "erin", "slack", "anybot", "mallory", "ed-idp")
        self.keys: dict[str, Ed25519PrivateKey] = {name: new_private_key() for name in names}
        self.idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(self.idp_key.public_key(), as_dict=True)
        (folder / "idp.jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1"}]}))
        text = {name: public_key_text(key) for name, key in self.keys.items()}
        self.trust = TrustConfig.model_validate(
            {
                "submitters": {
                    "billing": {"public_key": text["billing"], "grants": ["viewer", "editor"]},
                    "partner": {"public_key": text["partner"], "grants": ["*"], "users": ["u1"]},
                },
                "people": {
                    "carol": {"roles": ["events-lead"], "public_key": text["carol"]},
                    "erin": {"roles": ["operator"], "public_key": text["erin"]},
                    "dave": {"roles": ["finance"]},
                },
                "delegates": {
                    "slack": {"public_key": text["slack"], "signs_for": ["dave"]},
                    "anybot": {"public_key": text["anybot"], "signs_for": ["*"]},
                },
                "issuers": {
                    IDP: {"audience": "callgate", "jwks_file": str(folder / "idp.jwks.json")},
                    ED_IDP: {
                        "audience": "callgate",
                        "public_keys": [text["ed-idp"]],
                        "user_claim": "email",
                        "roles_claim": "groups",
                        "role_map": {"cg-approvers": "events-lead", "cg-ops": "operator"},
                    },
                },
            }
        )

    def signer(self, name: str, *, key_of: str | None = None) -> Signer:
        """``name``'s signer, or one claiming to be ``name`` holding ``key_of``'s key."""
        return Signer(key_id=name, key=self.keys[key_of or name])


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _refused(check: Callable[[str], object], token: str) -> str:
    """The reason ``check`` refuses ``token``; the token never appears in the message."""
    with pytest.raises(AuthError) as caught:
        check(token)
    assert token not in str(caught.value) and caught.value.reason in str(caught.value)
    return caught.value.reason


def _tampered(token: str, **changes: Any) -> str:
    """The same token with claims changed and the old signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64url_decode(payload))
    claims.update(changes)
    new_payload = base64url_encode(json.dumps(claims).encode()).decode()
    return f"{header}.{new_payload}.{signature}"


def _raw_token(key: Any, claims: dict[str, Any], *, kid: str, alg: str = "EdDSA") -> str:
    """A token minted straight with PyJWT, bypassing `sign`'s own limits (the attacker's way)."""
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def _decision(world: World, signer: str, person: str, **claims: Any) -> str:
    return sign_decision(
        world.signer(signer), person=person, claims={"act": "approve", "run": "r1", **claims}
    )


def _verify_decision(world: World, *, now: float | None = None) -> Callable[[str], object]:
    return lambda token: verify_decision(
        token, world.trust, now=time.time() if now is None else now
    )


# --- decisions -----------------------------------------------------------------------------


def test_a_person_signing_their_own_decision_is_verified(world: World) -> None:
    token = _decision(world, "carol", "carol", call_ids=["c1"])
    decision = verify_decision(token, world.trust, now=time.time())
    assert decision == VerifiedDecision(
        signer="carol", person="carol", roles=frozenset({"events-lead"}), claims=decision.claims
    )
    assert decision.claims["act"] == "approve" and decision.claims["call_ids"] == ["c1"]
    assert decision.claims["typ"] == "callgate.decision" and decision.claims["jti"]


def test_roles_claimed_in_the_token_are_not_honoured(world: World) -> None:
    token = _decision(world, "carol", "carol", roles=["operator", "admin"])
    assert verify_decision(token, world.trust, now=time.time()).roles == {"events-lead"}


def test_a_decision_signed_by_the_wrong_key_is_refused(world: World) -> None:
    token = sign_decision(
        world.signer("carol", key_of="mallory"),
        person="carol",
        claims={"act": "approve", "run": "r1"},
    )
    assert _refused(_verify_decision(world), token) == "signature does not verify"


def test_a_decision_signed_by_an_unknown_key_is_refused(world: World) -> None:
    token = _decision(world, "mallory", "carol")
    assert _refused(_verify_decision(world), token) == "unknown key 'mallory'"


def test_a_tampered_claim_breaks_the_signature(world: World) -> None:
    token = _decision(world, "carol", "carol", act="deny")
    assert verify_decision(token, world.trust, now=time.time()).claims["act"] == "deny"
    forged = _tampered(token, act="approve")
    assert _refused(_verify_decision(world), forged) == "signature does not verify"
    assert _refused(_verify_decision(world), _tampered(token, run="r2")) == (
        "signature does not verify"
    )


def test_a_tampered_key_id_is_refused(world: World) -> None:
    token = _decision(world, "carol", "carol")
    _, payload, signature = token.split(".")
    forged_header = base64url_encode(
        json.dumps({"alg": "EdDSA", "typ": "JWT", "kid": "erin"}).encode()
    ).decode()
    forged = f"{forged_header}.{payload}.{signature}"
    assert _refused(_verify_decision(world), forged) == "signature does not verify"


def test_an_expired_decision_is_refused_after_the_clock_skew(world: World) -> None:
    token = sign_decision(
        world.signer("carol"), person="carol", claims={"act": "approve", "run": "r1"}, ttl_s=60
    )
    signed_at = time.time()
    verify_decision(token, world.trust, now=signed_at + 60 + 20)  # within 30 s of skew
    assert _refused(_verify_decision(world, now=signed_at + 60 + 40), token) == "expired"


def test_a_decision_from_the_future_is_refused_beyond_the_clock_skew(world: World) -> None:
    token = _decision(world, "carol", "carol")
    signed_at = time.time()
    verify_decision(token, world.trust, now=signed_at - 20)  # a verifier's clock 20 s behind
    assert _refused(_verify_decision(world, now=signed_at - 60), token) == "not yet valid"


def test_a_decision_with_a_ten_year_lifetime_is_refused(world: World) -> None:
    issued = int(time.time())
    claims: dict[str, Any] = {"sub": "carol", "act": "approve", "run": "r1", "jti": "j1"}
    claims |= {"typ": "callgate.decision", "iat": issued, "exp": issued + 10 * 365 * DAY_S}
    token = _raw_token(world.keys["carol"], claims, kid="carol")
    assert _refused(_verify_decision(world), token) == "token lifetime exceeds 1 day"
    with pytest.raises(ValueError, match="ttl_s"):
        sign(world.signer("carol"), claims={"act": "approve"}, ttl_s=10 * 365 * DAY_S)


def test_a_decision_that_never_expires_is_refused(world: World) -> None:
    issued = int(time.time())
    claims: dict[str, Any] = {"sub": "carol", "act": "approve", "run": "r1", "jti": "j1"}
    claims |= {"typ": "callgate.decision", "iat": issued, "exp": float("nan")}
    token = _raw_token(world.keys["carol"], claims, kid="carol")
    assert _refused(_verify_decision(world), token) == "claim 'exp' must be a finite number"


def test_a_person_signing_as_someone_else_is_refused(world: World) -> None:
    token = _decision(world, "carol", "erin")
    assert _refused(_verify_decision(world), token) == "carol may not sign for erin"


def test_a_delegate_signs_for_the_people_it_covers_with_their_roles(world: World) -> None:
    decision = verify_decision(_decision(world, "slack", "dave"), world.trust, now=time.time())
    assert (decision.signer, decision.person, decision.roles) == (
        "slack",
        "dave",
        frozenset({"finance"}),
    )
    anyone = verify_decision(_decision(world, "anybot", "erin"), world.trust, now=time.time())
    assert (anyone.person, anyone.roles) == ("erin", frozenset({"operator"}))


def test_a_delegate_signing_for_someone_outside_signs_for_is_refused(world: World) -> None:
    token = _decision(world, "slack", "carol")
    assert _refused(_verify_decision(world), token) == "slack may not sign for carol"


def test_a_wildcard_delegate_covers_only_people_in_the_trust_file(world: World) -> None:
    token = _decision(world, "anybot", "zed")
    assert _refused(_verify_decision(world), token) == "unknown person 'zed'"


def test_a_person_without_a_key_of_their_own_cannot_sign(world: World) -> None:
    token = sign_decision(
        world.signer("dave", key_of="mallory"), person="dave", claims={"act": "a", "run": "r1"}
    )
    assert (
        _refused(_verify_decision(world), token) == "dave has no key of their own in the trust file"
    )


def test_a_submitter_key_cannot_sign_decisions(world: World) -> None:
    token = _decision(world, "billing", "carol")
    assert _refused(_verify_decision(world), token) == "key 'billing' is not a person or delegate"


def test_a_decision_missing_a_required_claim_is_refused(world: World) -> None:
    for missing in ("act", "run"):
        claims = {"act": "approve", "run": "r1"}
        del claims[missing]
        token = sign_decision(world.signer("carol"), person="carol", claims=claims)
        assert _refused(_verify_decision(world), token) == f"missing claim '{missing}'"


def test_a_token_of_another_type_is_not_a_decision(world: World) -> None:
    claims = {"sub": "carol", "act": "approve", "run": "r1", "typ": "callgate.submission"}
    token = sign(world.signer("carol"), claims, ttl_s=60)
    reason = _refused(_verify_decision(world), token)
    assert reason == "token type is 'callgate.submission', not 'callgate.decision'"


def test_unsigned_and_symmetric_tokens_are_refused(world: World) -> None:
    issued = int(time.time())
    claims: dict[str, Any] = {"sub": "carol", "act": "approve", "run": "r1", "jti": "j1"}
    claims |= {"typ": "callgate.decision", "iat": issued, "exp": issued + 60}
    unsigned = _raw_token(None, claims, kid="carol", alg="none")
    assert _refused(_verify_decision(world), unsigned) == "algorithm not allowed"
    public = (
        world.keys["carol"]
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    confused = _raw_token(public, claims, kid="carol", alg="HS256")
    assert _refused(_verify_decision(world), confused) == "algorithm not allowed"


def test_garbage_and_tokens_without_a_key_id_are_refused(world: World) -> None:
    assert _refused(_verify_decision(world), "not.a.token") == "malformed token"
    claims = {"sub": "carol", "act": "approve"}
    no_kid = jwt.encode(claims, world.keys["carol"], algorithm="EdDSA")
    assert _refused(_verify_decision(world), no_kid) == "token names no key (kid)"


def test_sign_decision_will_not_mislabel_its_person(world: World) -> None:
    with pytest.raises(ValueError, match="clash"):
        sign_decision(world.signer("carol"), person="carol", claims={"sub": "erin", "act": "a"})
    with pytest.raises(ValueError, match="set by sign"):
        sign(world.signer("carol"), {"exp": 4_000_000_000}, ttl_s=60)
    with pytest.raises(TypeError, match="JSON-able"):
        sign(world.signer("carol"), {"act": object()}, ttl_s=60)


def test_every_token_gets_a_fresh_jti_unless_given(world: World) -> None:
    first, second = (_decision(world, "carol", "carol") for _ in range(2))
    claims = [verify_decision(t, world.trust, now=time.time()).claims for t in (first, second)]
    assert claims[0]["jti"] != claims[1]["jti"]
    given = _decision(world, "carol", "carol", jti="decision-7")
    assert verify_decision(given, world.trust, now=time.time()).claims["jti"] == "decision-7"


# --- submissions ---------------------------------------------------------------------------


def _verify_submission(
    world: World, *, run_id: str = "r1", spec: dict[str, Any] = SPEC, now: float | None = None
) -> Callable[[str], object]:
    at = time.time() if now is None else now
    return lambda token: verify_submission(token, world.trust, run_id=run_id, spec=spec, now=at)


def test_a_signed_submission_names_its_submitter(world: World) -> None:
    token = sign_submission(world.signer("billing"), run_id="r1", spec=SPEC)
    reordered = dict(reversed(list(SPEC.items())))
    assert _verify_submission(world, spec=reordered)(token) == "billing"


def test_the_spec_digest_is_the_canonical_hash() -> None:
    assert spec_digest(SPEC) == args_hash(SPEC)
    assert spec_digest(SPEC) == hashlib.sha256(json.dumps(SPEC, sort_keys=True,
        separators=(",", ":")).encode()).hexdigest()  # fmt: skip


def test_a_spec_changed_after_signing_is_refused(world: World) -> None:
    token = sign_submission(world.signer("billing"), run_id="r1", spec=SPEC)
    widened = {**SPEC, "tools": ["rooms.book", "payments.refund"]}
    assert _refused(_verify_submission(world, spec=widened), token) == "spec changed after signing"


def test_a_submission_for_another_run_is_refused(world: World) -> None:
    token = sign_submission(world.signer("billing"), run_id="r1", spec=SPEC)
    assert _refused(_verify_submission(world, run_id="r2"), token) == "signed for another run"


def test_a_submission_from_a_non_submitter_key_is_refused(world: World) -> None:
    for name, reason in (
        ("carol", "key 'carol' is not a submitter"),
        ("mallory", "unknown key 'mallory'"),
    ):
        token = sign_submission(world.signer(name), run_id="r1", spec=SPEC)
        assert _refused(_verify_submission(world), token) == reason


def test_a_submission_signed_by_the_wrong_key_or_tampered_is_refused(world: World) -> None:
    token = sign_submission(world.signer("billing", key_of="mallory"), run_id="r1", spec=SPEC)
    assert _refused(_verify_submission(world), token) == "signature does not verify"
    token = sign_submission(world.signer("billing"), run_id="r1", spec=SPEC)
    forged = _tampered(token, run="r2", spec=spec_digest({"task": "other"}))
    assert _refused(_verify_submission(world, run_id="r2"), forged) == "signature does not verify"


def test_a_submitter_cannot_submit_in_anothers_name(world: World) -> None:
    claims = {
        "sub": "partner",
        "run": "r1",
        "spec": spec_digest(SPEC),
        "typ": "callgate.submission",
    }
    token = sign(world.signer("billing"), claims, ttl_s=60)
    assert _refused(_verify_submission(world), token) == "billing may not submit as partner"


def test_a_decision_typed_token_is_not_a_submission(world: World) -> None:
    claims = {"sub": "billing", "run": "r1", "spec": spec_digest(SPEC), "typ": "callgate.decision"}
    token = sign(world.signer("billing"), claims, ttl_s=60)
    assert "token type is 'callgate.decision'" in _refused(_verify_submission(world), token)


def test_an_expired_or_overlong_submission_is_refused(world: World) -> None:
    token = sign_submission(world.signer("billing"), run_id="r1", spec=SPEC, ttl_s=60)
    assert _refused(_verify_submission(world, now=time.time() + 120), token) == "expired"
    issued = int(time.time())
    claims: dict[str, Any] = {"sub": "billing", "run": "r1", "spec": spec_digest(SPEC), "jti": "j"}
    claims |= {"typ": "callgate.submission", "iat": issued, "exp": issued + DAY_S + 1}
    long_lived = _raw_token(world.keys["billing"], claims, kid="billing")
    assert _refused(_verify_submission(world), long_lived) == "token lifetime exceeds 1 day"


# --- grants --------------------------------------------------------------------------------


def test_a_submitter_may_vouch_only_with_roles_it_may_grant(world: World) -> None:
    check_grant(world.trust, "billing", {"user": "anyone", "roles": ["viewer", "editor"]})
    check_grant(world.trust, "billing", {"user": "anyone"})
    with pytest.raises(AuthError) as caught:
        check_grant(world.trust, "billing", {"user": "u1", "roles": ["viewer", "admin"]})
    assert caught.value.reason == "billing may not grant 'admin'"


def test_a_wildcard_grant_allows_any_role(world: World) -> None:
    check_grant(world.trust, "partner", {"user": "u1", "roles": ["admin", "operator"]})


def test_a_submitter_limited_to_users_may_vouch_for_no_one_else(world: World) -> None:
    check_grant(world.trust, "partner", {"user": "u1", "roles": []})
    with pytest.raises(AuthError) as caught:
        check_grant(world.trust, "partner", {"user": "u2", "roles": []})
    assert caught.value.reason == "partner may not vouch for user 'u2'"


def test_grants_are_checked_only_for_submitters_and_real_role_lists(world: World) -> None:
    with pytest.raises(AuthError, match="unknown submitter 'carol'"):
        check_grant(world.trust, "carol", {"user": "u1"})
    with pytest.raises(AuthError, match="must be a list of strings"):
        check_grant(world.trust, "billing", {"user": "u1", "roles": "admin"})


# --- identity providers' tokens ------------------------------------------------------------


def _present(claims: dict[str, Any]) -> dict[str, Any]:
    """The claims without those a test set to None (to leave them out)."""
    return {name: value for name, value in claims.items() if value is not None}


def _idp_token(world: World, **claims: Any) -> str:
    body = {"iss": IDP, "aud": "callgate", "sub": "u1", "iat": int(NOW), "exp": int(NOW) + 3600}
    payload = _present({**body, **claims})
    return jwt.encode(payload, world.idp_key, algorithm="RS256", headers={"kid": "k1"})


def _ed_idp_token(world: World, **claims: Any) -> str:
    body = {
        "iss": ED_IDP,
        "aud": "callgate",
        "email": "carol@example.com",
        "iat": int(NOW),
        "exp": int(NOW) + 60,
    }
    return jwt.encode(_present({**body, **claims}), world.keys["ed-idp"], algorithm="EdDSA")


MAX_AGE_S = 3600.0
"""The identity tokens' lifetime cap these tests verify with (the deployment's setting)."""


def _verify_identity_ok(world: World, token: str) -> VerifiedIdentity:
    return verify_identity_token(token, world.trust, now=NOW, max_lifetime_s=MAX_AGE_S)


def _verify_identity(world: World, *, now: float = NOW) -> Callable[[str], object]:
    return lambda token: verify_identity_token(
        token, world.trust, now=now, max_lifetime_s=MAX_AGE_S
    )


def test_an_identity_token_from_a_jwks_issuer_is_verified(world: World) -> None:
    identity = verify_identity_token(
        _idp_token(world, roles=["viewer", "editor"]),
        world.trust,
        now=NOW,
        max_lifetime_s=MAX_AGE_S,
    )
    assert (identity.user, identity.roles, identity.issuer) == ("u1", ("viewer", "editor"), IDP)
    space_separated = _idp_token(world, roles="viewer editor viewer")
    assert verify_identity_token(
        space_separated, world.trust, now=NOW, max_lifetime_s=MAX_AGE_S
    ).roles == ("viewer", "editor")


def test_an_identity_token_from_an_unknown_issuer_is_refused(world: World) -> None:
    token = _idp_token(world, iss="https://evil.example")
    assert _refused(_verify_identity(world), token) == "unknown issuer 'https://evil.example'"
    assert _refused(_verify_identity(world), _idp_token(world, iss=None)) == "unknown issuer None"


def test_an_identity_token_for_another_audience_is_refused(world: World) -> None:
    token = _idp_token(world, aud="some-other-app")
    assert _refused(_verify_identity(world), token) == "wrong audience"
    assert _refused(_verify_identity(world), _idp_token(world, aud=None)) == "missing claim 'aud'"


def test_an_identity_token_signed_by_another_key_is_refused(world: World) -> None:
    impostor = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = {"iss": IDP, "aud": "callgate", "sub": "u1", "exp": int(NOW) + 60}
    token = jwt.encode(claims, impostor, algorithm="RS256", headers={"kid": "k1"})
    assert _refused(_verify_identity(world), token) == "signature does not verify"
    forged = _tampered(_idp_token(world), sub="admin")
    assert _refused(_verify_identity(world), forged) == "signature does not verify"


def test_an_issuers_public_key_used_as_an_hmac_secret_is_refused(world: World) -> None:
    secret = world.idp_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = base64url_encode(json.dumps({"alg": "HS256", "kid": "k1"}).encode()).decode()
    claims = {"iss": IDP, "aud": "callgate", "sub": "admin", "exp": int(NOW) + 60}
    payload = base64url_encode(json.dumps(claims).encode()).decode()
    mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    token = f"{header}.{payload}.{base64url_encode(mac).decode()}"
    assert (
        _refused(_verify_identity(world), token) == f"no key of {IDP} fits the token's kid and alg"
    )


def test_an_expired_or_future_identity_token_is_refused(world: World) -> None:
    token = _idp_token(world)
    assert _refused(_verify_identity(world, now=NOW + 3600 + 31), token) == "expired"
    assert _refused(_verify_identity(world, now=NOW - 31), token) == "not yet valid"
    assert _refused(_verify_identity(world), _idp_token(world, exp=None)) == "missing claim 'exp'"


def test_an_identity_token_must_say_when_it_was_issued_and_live_no_longer_than_the_cap(
    world: World,
) -> None:
    assert _refused(_verify_identity(world), _idp_token(world, iat=None)) == "missing claim 'iat'"
    long_lived = _idp_token(world, exp=int(NOW) + int(MAX_AGE_S) + 1)
    assert _refused(_verify_identity(world), long_lived) == "token lifetime exceeds 3600 s"
    issued_long_ago = _idp_token(world, iat=int(NOW) - 7200, exp=int(NOW) + 60)
    assert _refused(_verify_identity(world), issued_long_ago) == "token lifetime exceeds 3600 s"


def test_an_identity_tokens_id_is_its_issuer_and_jti_else_the_token(world: World) -> None:
    """What the ingress records once: two tokens with one jti are one token; without a jti,
    each token is its own."""
    one, again = _idp_token(world, jti="j-1"), _idp_token(world, jti="j-1", roles=["x"])
    assert _verify_identity_ok(world, one).token_id == _verify_identity_ok(world, again).token_id
    other = _verify_identity_ok(world, _idp_token(world, jti="j-2")).token_id
    assert other != _verify_identity_ok(world, one).token_id
    plain = _verify_identity_ok(world, _idp_token(world))
    assert plain.token_id != _verify_identity_ok(world, _idp_token(world, roles=["x"])).token_id
    assert plain.expires_at == int(NOW) + 3600


def test_the_role_claim_is_mapped_and_unmapped_values_are_dropped(world: World) -> None:
    token = _ed_idp_token(world, groups=["cg-ops", "everyone", "cg-approvers"], roles=["admin"])
    identity = verify_identity_token(token, world.trust, now=NOW, max_lifetime_s=MAX_AGE_S)
    assert identity == type(identity)(
        user="carol@example.com", roles=("operator", "events-lead"), issuer=ED_IDP
    )
    assert _verify_identity_ok(world, _ed_idp_token(world)).roles == ()


def test_a_role_claim_of_the_wrong_shape_is_refused(world: World) -> None:
    token = _ed_idp_token(world, groups={"cg-ops": True})
    assert _refused(_verify_identity(world), token) == (
        "claim 'groups' is neither a list of strings nor a string"
    )


def test_the_user_comes_from_the_issuers_user_claim(world: World) -> None:
    token = _ed_idp_token(world, email=None, sub="carol")
    assert _refused(_verify_identity(world), token) == "missing claim 'email'"
    token = _ed_idp_token(world, email=["carol@example.com"])
    assert _refused(_verify_identity(world), token) == "claim 'email' must be a non-empty string"
