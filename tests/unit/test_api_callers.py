"""Who the HTTP API takes a bearer token for (pure): a submitter's or person's own-key token, an
identity provider's JWT for a person of the trust file — and nobody else: not a delegate, not a
decision token replayed as a bearer, not a token that lives too long, is expired or foreign."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.api.callers import (
    Forbidden,
    authenticate,
    may_control,
    may_decide,
    may_read,
    may_relay,
    may_submit,
)
from callgate.auth.keys import public_key_text
from callgate.auth.tokens import Signer, sign_access, sign_decision
from callgate.auth.trust import TrustConfig
from callgate.decisions.record import ApprovalRecord
from callgate.errors import AuthError
from callgate.records import RunRecord

KEYS = {name: Ed25519PrivateKey.generate() for name in ("svc", "carol", "bot", "idp")}
TRUST = TrustConfig.model_validate(
    {
        "submitters": {"svc": {"public_key": public_key_text(KEYS["svc"]), "grants": ["viewer"]}},
        "people": {
            "carol": {"public_key": public_key_text(KEYS["carol"]), "roles": ["events-lead"]},
            "dora": {"roles": ["operator"]},
        },
        "delegates": {"bot": {"public_key": public_key_text(KEYS["bot"]), "signs_for": ["*"]}},
        "issuers": {
            "https://idp.example": {
                "audience": "callgate",
                "public_keys": [public_key_text(KEYS["idp"])],
                "algorithms": ["EdDSA"],
            }
        },
    }
)


def signer(name: str) -> Signer:
    return Signer(name, KEYS[name])


def header(token: str) -> str:
    return f"Bearer {token}"


def idp_token(**over: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": "https://idp.example",
        "aud": "callgate",
        "sub": "dora",
        "roles": ["admin"],
        "iat": now,
        "exp": now + 300,
        **over,
    }
    return jwt.encode(claims, KEYS["idp"], algorithm="EdDSA")


def test_own_key_tokens_name_a_submitter_or_a_person_with_trust_roles() -> None:
    now = time.time()
    service = authenticate(header(sign_access(signer("svc"))), TRUST, now=now)
    assert (service.name, service.kind, service.roles) == ("svc", "submitter", frozenset())
    person = authenticate(header(sign_access(signer("carol"))), TRUST, now=now)
    assert (person.name, person.kind, person.roles) == (
        "carol",
        "person",
        frozenset({"events-lead"}),
    )


def test_an_identity_providers_token_is_a_person_with_the_trust_files_roles_only() -> None:
    caller = authenticate(header(idp_token()), TRUST, now=time.time())
    assert (caller.name, caller.kind, caller.via) == (
        "dora",
        "person",
        "issuer:https://idp.example",
    )
    assert caller.roles == frozenset({"operator"}), "the token's own roles claim counts for nothing"


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "basic",
        "garbage",
        "delegate",
        "decision",
        "too long",
        "expired",
        "foreign",
        "impersonation",
        "wrong audience",
        "idp forged",
    ],
)
def test_an_unverifiable_bearer_is_refused(case: str) -> None:
    now = time.time()
    mallory = Ed25519PrivateKey.generate()
    claims = {"run": "r", "act": "cancel", "jti": "j"}
    tokens = {
        "missing": None,
        "basic": f"Basic {sign_access(signer('carol'))}",
        "garbage": "Bearer abc.def.ghi",
        "delegate": header(sign_access(signer("bot"))),
        "decision": header(sign_decision(signer("carol"), person="carol", claims=claims)),
        "too long": header(
            jwt.encode(
                {
                    "sub": "carol",
                    "typ": "callgate.access",
                    "jti": "j",
                    "iat": int(now),
                    "exp": int(now) + 7200,
                },
                KEYS["carol"],
                algorithm="EdDSA",
                headers={"kid": "carol"},
            )
        ),
        "expired": header(
            jwt.encode(
                {
                    "sub": "carol",
                    "typ": "callgate.access",
                    "jti": "j",
                    "iat": int(now) - 900,
                    "exp": int(now) - 600,
                },
                KEYS["carol"],
                algorithm="EdDSA",
                headers={"kid": "carol"},
            )
        ),
        "foreign": header(sign_access(Signer("carol", mallory))),
        "impersonation": header(
            jwt.encode(
                {
                    "sub": "dora",
                    "typ": "callgate.access",
                    "jti": "j",
                    "iat": int(now),
                    "exp": int(now) + 60,
                },
                KEYS["carol"],
                algorithm="EdDSA",
                headers={"kid": "carol"},
            )
        ),
        "wrong audience": header(idp_token(aud="someone-else")),
        "idp forged": header(
            jwt.encode(
                {
                    "iss": "https://idp.example",
                    "aud": "callgate",
                    "sub": "dora",
                    "iat": int(now),
                    "exp": int(now) + 60,
                },
                mallory,
                algorithm="EdDSA",
            )
        ),
    }
    with pytest.raises(AuthError):
        authenticate(tokens[case], TRUST, now=now)


def test_a_submitter_starts_runs_only_within_its_grants_and_decides_nothing() -> None:
    service = authenticate(header(sign_access(signer("svc"))), TRUST, now=time.time())
    may_submit(service, TRUST, {"user": "u", "roles": ["viewer"]}, "run-1")
    with pytest.raises(Forbidden, match="may not grant 'admin'"):
        may_submit(service, TRUST, {"user": "u", "roles": ["admin"]}, "run-1")
    run = RunRecord(run_id="run-1", api="openai-chat", model="m", input="i", identity={"user": "u"})
    with pytest.raises(Forbidden, match="submitting service"):
        may_control(service, TRUST, run)
    carol = authenticate(header(sign_access(signer("carol"))), TRUST, now=time.time())
    with pytest.raises(Forbidden, match="runs are started by a submitting service"):
        may_submit(carol, TRUST, {"user": "u"}, "run-1")
    with pytest.raises(Forbidden, match="neither the run's user"):
        may_control(carol, TRUST, run)


def test_a_submitter_reads_only_runs_its_grants_cover_a_person_reads_any() -> None:
    service = authenticate(header(sign_access(signer("svc"))), TRUST, now=time.time())
    carol = authenticate(header(sign_access(signer("carol"))), TRUST, now=time.time())
    ours = RunRecord(
        run_id="r1",
        api="openai-chat",
        model="m",
        input="i",
        identity={"user": "u", "roles": ["viewer"]},
    )
    theirs = ours.model_copy(update={"identity": {"user": "u", "roles": ["admin"]}})
    may_read(service, TRUST, ours)
    may_read(carol, TRUST, theirs)
    with pytest.raises(Forbidden, match="may not read this run"):
        may_read(service, TRUST, theirs)


def test_the_server_relays_only_for_people_its_delegate_may_sign_for() -> None:
    narrow = TRUST.model_copy(
        update={
            "delegates": {"bot": TRUST.delegates["bot"].model_copy(update={"signs_for": ["carol"]})}
        }
    )
    carol = authenticate(header(sign_access(signer("carol"))), TRUST, now=time.time())
    dora = authenticate(header(idp_token()), TRUST, now=time.time())
    may_relay(carol, narrow, "bot")
    with pytest.raises(Forbidden, match="may not sign for dora"):
        may_relay(dora, narrow, "bot")
    with pytest.raises(Forbidden, match="may not sign for carol"):
        may_relay(carol, narrow, "nobody")


def test_a_person_decides_only_with_the_role_and_never_their_own_request() -> None:
    record = ApprovalRecord(
        approval_id="a1",
        run_id="r1",
        turn=1,
        call_id="t1.0",
        tool="reserve_seat",
        tool_version="1",
        args_hash="h",
        arguments="{}",
        requested_by="carol",
        approver_role="events-lead",
        expires_ms=0,
    )
    carol = authenticate(header(sign_access(signer("carol"))), TRUST, now=time.time())
    dora = authenticate(header(idp_token()), TRUST, now=time.time())
    with pytest.raises(Forbidden, match="cannot approve their own request"):
        may_decide(carol, TRUST, record)
    may_decide(carol, TRUST, record.model_copy(update={"requested_by": "alice"}))
    with pytest.raises(Forbidden, match="does not hold the role events-lead"):
        may_decide(dora, TRUST, record)
