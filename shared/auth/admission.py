"""Who a new run acts for, as the deployment verifies it — never as the spec claims it.

A ``start_run`` job (`callgate.jobs.StartJob`) carries its spec and either a submitting
service's signature over exactly that spec and run id, or an identity provider's token.  A
service may assert an identity only within the roles (and users) the deployment lets it grant;
a token's roles are the ones the deployment maps its claim to.  A job with neither, a broken
signature, a spec changed after signing or a role nobody granted is refused with the reason,
and no run is created.  Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from callgate.auth.tokens import check_grant, verify_identity_token, verify_submission
from callgate.auth.trust import TrustConfig
from callgate.errors import AuthError
from callgate.jobs import StartJob


@dataclass(frozen=True, slots=True)
class Admitted:
    """A verified identity and who vouched for it (``service:NAME`` or ``issuer:ISS``)."""

    identity: dict[str, Any]
    vouched_by: str


def admit(job: StartJob, run_id: str, trust: TrustConfig, *, now: float) -> Admitted:
    """The identity ``job``'s run may act for; `AuthError` with the reason if none holds."""
    claimed = job.spec.get("identity")
    if job.token is not None:
        service = verify_submission(job.token, trust, run_id=run_id, spec=job.spec, now=now)
        if not isinstance(claimed, dict):
            raise AuthError(f"{service} vouched for no identity")
        check_grant(trust, service, claimed)
        return Admitted(dict(claimed), f"service:{service}")
    if job.identity_token is not None:
        verified = verify_identity_token(job.identity_token, trust, now=now)
        if isinstance(claimed, dict) and claimed.get("user") not in (None, verified.user):
            raise AuthError(f"the spec names {claimed.get('user')!r}, the token {verified.user!r}")
        identity = {"user": verified.user, "roles": list(verified.roles)}
        return Admitted(identity, f"issuer:{verified.issuer}")
    raise AuthError("unsigned: no submitter's signature and no identity token")
