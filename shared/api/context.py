"""What every route shares: the deployment's client, approvals desk, trust and the server's
delegate key, and the `caller` dependency that turns a bearer token into a `Caller` — or into a
401 / 403 that is said in the run's trace when the request names a run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request

from callgate.api.callers import Caller, Forbidden, RunCheck, authenticate, may_read
from callgate.api.problems import Problem
from callgate.api.settings import ApiSettings
from callgate.auth.deployment import TrustSource, signer_of
from callgate.auth.keys import read_private_key
from callgate.auth.tokens import Signer
from callgate.auth.trust import TrustConfig
from callgate.client import CallgateClient
from callgate.clock import now_ms
from callgate.config import Settings
from callgate.decisions.desk import ApprovalDesk
from callgate.decisions.refusal import refuse
from callgate.envelopes import new_id
from callgate.errors import AuthError
from callgate.logs import log_fields
from callgate.records import RunRecord

log = logging.getLogger("callgate.api")

UNAUTHENTICATED_EVENT = "api.unauthenticated"
FORBIDDEN_EVENT = "api.forbidden"


@dataclass
class ApiContext:
    """One deployment, as the API reaches it."""

    settings: Settings
    api: ApiSettings
    client: CallgateClient
    desk: ApprovalDesk
    trust: TrustSource
    delegate: Signer

    @classmethod
    def open(cls, settings: Settings, api: ApiSettings) -> ApiContext:
        trust, delegate = preflight(settings, api)
        client = CallgateClient(settings)
        desk = ApprovalDesk(client.redis, client.keys, client.ledger, settings.tenant)
        return cls(settings, api, client, desk, trust, delegate)

    async def close(self) -> None:
        await self.client.close()

    async def refused(
        self, run_id: str | None, event: str, reason: str, person: str | None
    ) -> None:
        """Say in the run's trace (if the request names a run that exists) that the door
        refused someone, and why; the token itself is never written."""
        log.warning(
            "api request refused",
            extra=log_fields(run_id=run_id, event=event, person=person, reason=reason),
        )
        if run_id:
            await refuse(self.client.ledger, event, run_id, new_id(), reason, person)

    async def readable_run(
        self, run_id: str, caller: Caller, may: RunCheck = may_read
    ) -> RunRecord:
        """The run, if the caller ``may`` (read it, by default): else 404, or 403 (said in
        its trace)."""
        run = await self.client.run(run_id)
        if run is None:
            raise Problem(404, f"no run {run_id}: check the id (GET /runs lists them)")
        try:
            may(caller, self.trust.current(), run)
        except Forbidden as exc:
            raise await self.forbid(run_id, caller, exc) from None
        return run

    async def forbid(self, run_id: str | None, caller: Caller, exc: Forbidden) -> Problem:
        """The 403 for ``exc``, once it is said in the run's trace."""
        await self.refused(run_id, FORBIDDEN_EVENT, str(exc), caller.name)
        return Problem(403, str(exc))


def preflight(settings: Settings, api: ApiSettings) -> tuple[TrustSource, Signer]:
    """The trust file and the delegate key, and a check that the submitter key reads: a
    server that could not sign is refused at start-up (`CallgateError` says what to do),
    not at its first request."""
    signer_of(settings)
    if api.delegate_key is not None:
        delegate = Signer(api.delegate, read_private_key(api.delegate_key))
    else:
        delegate = signer_of(settings, api.delegate)
    return TrustSource(settings), delegate


def context_of(request: Request) -> ApiContext:
    state: ApiContext = request.app.state.callgate
    return state


class SessionReader(Protocol):
    """The web console's sessions (`callgate.console.session`), when the app serves it."""

    def read(self, request: Request) -> object | None: ...

    async def caller(self, request: Request, trust: TrustConfig) -> Caller: ...


async def current_caller(request: Request) -> Caller:
    """The verified caller — from the bearer token, else from the web console's session cookie
    (which also needs its CSRF token on a change) — or a 401 (said in the named run's trace)
    saying why not."""
    ctx = context_of(request)
    header = request.headers.get("authorization")
    sessions: SessionReader | None = getattr(request.app.state, "sessions", None)
    try:
        if header is None and sessions is not None and sessions.read(request) is not None:
            return await sessions.caller(request, ctx.trust.current())
        return authenticate(header, ctx.trust.current(), now=now_ms() / 1000)
    except AuthError as exc:
        run_id = await run_named(request, ctx)
        await ctx.refused(run_id, UNAUTHENTICATED_EVENT, exc.reason, None)
        raise Problem(
            401,
            f"{exc.reason}: send a valid bearer token (`callgate keys token "
            "NAME`, or your identity provider's)",
        ) from None


async def run_named(request: Request, ctx: ApiContext) -> str | None:
    """The run a request concerns: its path's run id, or the run of the approval it names."""
    run_id = request.path_params.get("run_id")
    if isinstance(run_id, str):
        return run_id
    approval_id = request.path_params.get("approval_id")
    if isinstance(approval_id, str):
        record = await ctx.desk.find(approval_id)
        return record.run_id if record is not None else None
    return None


Ctx = Annotated[ApiContext, Depends(context_of)]
Who = Annotated[Caller, Depends(current_caller)]
