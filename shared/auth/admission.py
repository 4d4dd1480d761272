"""Who a new run acts for, as the deployment verifies it — never as the spec claims it.

A ``start_run`` job (`callgate.jobs.StartJob`) carries its spec, a submitting service's
signature over exactly that spec and run id, and maybe an identity provider's token.  A
service may assert an identity only within the roles (and users) the deployment lets it grant;
a token's roles are the ones the deployment maps its claim to, and a token is short-lived and
starts one run (the caller records `Admitted.token_use` once).  A job with no signature, a
broken one, a spec changed after signing or a role nobody granted is refused with the reason,
and no run is created.  Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from callgate.auth.tenancy import check_tenancy, check_tenant_named, issuer_identity_tenant
from callgate.auth.tokens import CLOCK_SKEW_S, check_grant, verify_identity_token, verify_submission
from callgate.auth.trust import TrustConfig
from callgate.errors import AuthError
from callgate.jobs import StartJob


@dataclass(frozen=True, slots=True)
class TokenUse:
    """An identity token a run is started with: the caller records it once (it starts one run)
    and keeps the record until ``expires_ms``."""

    token_id: str
    expires_ms: int


@dataclass(frozen=True, slots=True)
class Admitted:
    """A verified identity and who vouched for it (``service:NAME`` or ``issuer:ISS``)."""

    identity: dict[str, Any]
    vouched_by: str
    token_use: TokenUse | None = None
    """The identity token's single use, when the identity is an issuer's."""


def admit(
    job: StartJob, run_id: str, trust: TrustConfig, *, now: float, token_max_age_s: float
) -> Admitted:
    """The identity ``job``'s run may act for; `AuthError` with the reason if none holds.
    A submitter's signature over the spec and run id is always needed, an identity token's
    beside it too: a token lifted from somewhere starts nothing without a submitter's key."""
    claimed = job.spec.get("identity")
    if job.token is None:
        beside = "beside the identity token" if job.identity_token else "and no identity token"
        raise AuthError(f"unsigned: no submitter's signature {beside}")
    service = verify_submission(job.token, trust, run_id=run_id, spec=job.spec, now=now)
    if job.identity_token is None:
        if not isinstance(claimed, dict):
            raise AuthError(f"{service} vouched for no identity")
        check_grant(trust, service, claimed)
        check_tenancy(trust, claimed, run_id)
        check_tenant_named(trust, service, claimed)
        return Admitted(dict(claimed), f"service:{service}")
    verified = verify_identity_token(
        job.identity_token, trust, now=now, max_lifetime_s=token_max_age_s
    )
    if isinstance(claimed, dict) and claimed.get("user") not in (None, verified.user):
        raise AuthError(f"the spec names {claimed.get('user')!r}, the token {verified.user!r}")
    identity = issuer_identity_tenant(
        trust, service, claimed, {"user": verified.user, "roles": list(verified.roles)}
    )
    check_tenancy(trust, identity, run_id)
    check_tenant_named(trust, service, identity)
    # Kept past ``exp`` by the clock skew a verifier allows, so no late second use slips by.
    use = TokenUse(verified.token_id, int((verified.expires_at + CLOCK_SKEW_S) * 1000))
    return Admitted(identity, f"issuer:{verified.issuer}", use)
