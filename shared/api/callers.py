"""Who is asking, from the bearer token the deployment verifies, and what they may ask.  Pure.

A caller is a submitting service or a person, each as the trust file lists them:

* a token signed with their own key (`callgate keys token NAME`, ``typ`` ``callgate.access``,
  at most an hour long), verified against the key the trust file holds for NAME;
* a JWT from an identity provider in the trust file's ``issuers``: its user is a person, with
  the roles the trust file gives that person (the roles the validator will use too).

A submitter may start runs, send replies and read runs within its grants and nothing else; a
person may read runs and decide within their trust roles and nothing else.  The decision checks
are the door's courtesy — they answer 403 before anything is posted — while the validator still
verifies every decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from callgate.auth.tenancy import check_tenancy, check_tenant_named
from callgate.auth.tokens import check_grant, issuer_of, verify_access, verify_identity_token
from callgate.auth.trust import ANY, TrustConfig
from callgate.decisions.record import ApprovalRecord
from callgate.errors import AuthError
from callgate.records import CallRecord, RunRecord

IDENTITY_TOKEN_MAX_AGE_S = 3600.0
"""The longest an identity provider's bearer token may live."""


class Forbidden(Exception):
    """A known caller asked for what they may not do: the one line to answer with (403)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified caller."""

    name: str
    kind: Literal["submitter", "person"]
    roles: frozenset[str]
    """A person's roles from the trust file (never from a token); empty for a submitter."""
    via: str
    """``key`` (their own key signed the token) or ``issuer:ISS``."""


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer …`` header; `AuthError` if there is none."""
    if not header:
        raise AuthError("no bearer token (send Authorization: Bearer TOKEN)")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header is not 'Bearer TOKEN'")
    return token.strip()


def authenticate(header: str | None, trust: TrustConfig, *, now: float) -> Caller:
    """The caller a bearer token proves; `AuthError` (401) with the reason if it proves none."""
    token = bearer(header)
    issuer = issuer_of(token)
    if issuer is not None and issuer in trust.issuers:
        verified = verify_identity_token(
            token, trust, now=now, max_lifetime_s=IDENTITY_TOKEN_MAX_AGE_S
        )
        return Caller(
            verified.user, "person", trust.roles_of(verified.user), f"issuer:{verified.issuer}"
        )
    name = verify_access(token, trust, now=now)
    if name in trust.submitters:
        return Caller(name, "submitter", frozenset(), "key")
    return Caller(name, "person", trust.roles_of(name), "key")


def as_person(caller: Caller, trust: TrustConfig) -> None:
    """`Forbidden` unless the caller is a person of the trust file (who alone decide)."""
    if caller.kind != "person":
        raise Forbidden(
            f"{caller.name} is a submitting service: it may start runs and send replies, not decide"
        )
    if caller.name not in trust.people:
        raise Forbidden(f"{caller.name} is not a person of the deployment's trust file")


def may_submit(caller: Caller, trust: TrustConfig, identity: Any, run_id: str) -> None:
    """`Forbidden` unless a submitter asks for a run whose identity its grants cover."""
    if caller.kind != "submitter":
        raise Forbidden(f"{caller.name} is a person: runs are started by a submitting service")
    if not isinstance(identity, dict):
        raise Forbidden("the spec names no identity for the run to act for")
    try:
        check_grant(trust, caller.name, identity)
        check_tenancy(trust, identity, run_id)
        check_tenant_named(trust, caller.name, identity)
    except AuthError as exc:
        raise Forbidden(exc.reason) from None


RunCheck = Callable[[Caller, TrustConfig, RunRecord], None]
"""`may_read`, `may_reply`: raise `Forbidden` unless the caller may."""


def may_read(caller: Caller, trust: TrustConfig, run: RunRecord) -> None:
    """`Forbidden` unless a person asks, or a submitter that could have started this run (its
    grants cover the run's identity): a service sees its own kind of runs, not every tenant's."""
    if caller.kind == "person":
        return
    try:
        check_grant(trust, caller.name, run.identity)
    except AuthError as exc:
        raise Forbidden(f"{caller.name} may not read this run ({exc.reason})") from None


def may_reply(caller: Caller, trust: TrustConfig, run: RunRecord) -> None:
    """`Forbidden` unless a submitter that may vouch for the run's identity sends the reply."""
    if caller.kind != "submitter":
        raise Forbidden(f"{caller.name} is a person: a reply is sent by a submitting service")
    try:
        check_grant(trust, caller.name, run.identity)
    except AuthError as exc:
        raise Forbidden(exc.reason) from None


def may_relay(caller: Caller, trust: TrustConfig, delegate: str) -> None:
    """`Forbidden` unless this server's delegate key may sign for the caller (the validator
    would refuse its decision otherwise: `callgate.auth.tokens.verify_decision`)."""
    entry = trust.delegates.get(delegate)
    if entry is None or not (ANY in entry.signs_for or caller.name in entry.signs_for):
        raise Forbidden(
            f"this server may not sign for {caller.name}: its delegate "
            f"{delegate!r} does not list them in signs_for"
        )


def may_decide(caller: Caller, trust: TrustConfig, record: ApprovalRecord) -> None:
    """`Forbidden` unless the caller holds the role the approval names and did not ask for
    the call themselves."""
    as_person(caller, trust)
    if record.approver_role not in caller.roles:
        raise Forbidden(f"{caller.name} does not hold the role {record.approver_role}")
    if caller.name == record.requested_by:
        raise Forbidden("the requester cannot approve their own request")


def may_control(caller: Caller, trust: TrustConfig, run: RunRecord) -> None:
    """`Forbidden` unless the caller is the run's user or holds the operator role."""
    as_person(caller, trust)
    if caller.name != run.identity.get("user") and trust.operator_role not in caller.roles:
        raise Forbidden(
            f"{caller.name} is neither the run's user nor holds the role {trust.operator_role}"
        )


def may_resolve(
    caller: Caller, trust: TrustConfig, call: CallRecord, record: ApprovalRecord | None
) -> None:
    """`Forbidden` unless the caller holds the operator role or the call's approver role."""
    as_person(caller, trust)
    roles = {trust.operator_role} | ({record.approver_role} if record is not None else set())
    if not roles & caller.roles:
        raise Forbidden(f"{caller.name} holds none of the resolver roles {sorted(roles)}")
