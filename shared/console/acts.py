"""The console's writes: approve, deny, resolve, cancel and resume, each behind a confirmation
page that shows exactly what is decided on.  A confirmed form calls the API's own action route
functions (`callgate.api.actions`) — the same door checks, the same signed decision through
`ApprovalDesk`, the same verdict — so a refusal reads on the page as the API says it.  A write
needs the session cookie and its CSRF token (checked by `current_caller`); a bearer header
alone is not enough here, so a proxy that adds one cannot be ridden by another site's form."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from callgate.api import actions
from callgate.api.callers import Caller
from callgate.api.context import ApiContext, context_of, current_caller
from callgate.api.inbox import approval_item
from callgate.api.problems import Problem
from callgate.console.pages import csrf_of, problem_page, signed_page
from callgate.console.render import page

router = APIRouter(include_in_schema=False)
Outcome = Literal["applied", "not_applied", "recheck"]
OUTCOMES: tuple[Outcome, ...] = ("applied", "not_applied", "recheck")


async def _acting(request: Request) -> Caller:
    """The session's person for a write (401 without a session; 403 without its CSRF token)."""
    if request.app.state.sessions.read(request) is None:
        raise Problem(401, "no valid console session (sign in again)")
    return await current_caller(request)


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    return value.strip() or None if isinstance(value, str) else None


def _done(
    request: Request, caller: Caller, verdict: actions.Verdict, status: int, run_id: str
) -> Response:
    return page(
        "done.html",
        status=status,
        caller=caller,
        csrf=csrf_of(request),
        verdict=verdict,
        run_id=run_id,
    )


@router.get("/console/approvals/{approval_id}/{decision}")
async def confirm_decision(
    request: Request, approval_id: str, decision: Literal["approve", "deny"]
) -> Response:
    async def gather(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
        record = await ctx.desk.find(approval_id)
        if record is None:
            raise Problem(404, f"no pending approval {approval_id} (decided, expired or unknown)")
        return {"item": approval_item(record)}

    return await signed_page(request, "confirm_decision.html", gather, decision=decision)


@router.post("/console/approvals/{approval_id}/{decision}")
async def decide(
    request: Request, approval_id: str, decision: Literal["approve", "deny"]
) -> Response:
    ctx, caller = context_of(request), None
    try:
        caller = await _acting(request)
        form = await request.form()
        record = await ctx.desk.find(approval_id)
        body = actions.Decide(reason=_field(form, "reason"), args_hash=_field(form, "args_hash"))
        answer = Response()
        verdict = await actions.decide(ctx, caller, answer, approval_id, decision, body)
    except Problem as exc:
        return problem_page(request, exc, caller)
    return _done(request, caller, verdict, answer.status_code, record.run_id if record else "")


@router.get("/console/runs/{run_id}/calls/{call_id}/resolve")
async def confirm_resolve(
    request: Request, run_id: str, call_id: str, outcome: Outcome
) -> Response:
    async def gather(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
        call = await ctx.client.ledger.get_call(run_id, call_id)
        if call is None:
            raise Problem(404, f"no call {call_id} in run {run_id}")
        return {"call": call}

    return await signed_page(
        request, "confirm_resolve.html", gather, run_id=run_id, outcome=outcome
    )


@router.post("/console/runs/{run_id}/calls/{call_id}/resolve")
async def resolve(request: Request, run_id: str, call_id: str) -> Response:
    ctx, caller = context_of(request), None
    try:
        caller = await _acting(request)
        body = _resolution(await request.form())
        answer = Response()
        verdict = await actions.resolve(ctx, caller, answer, run_id, call_id, body)
    except Problem as exc:
        return problem_page(request, exc, caller)
    return _done(request, caller, verdict, answer.status_code, run_id)


def _resolution(form: Any) -> actions.Resolve:
    """The form as the API's `Resolve` body (a 422 `Problem` saying what is wrong)."""
    raw = _field(form, "result")
    try:
        result = None if raw is None else orjson.loads(raw)
        return actions.Resolve.model_validate(
            {"outcome": _field(form, "outcome"), "result": result, "reason": _field(form, "reason")}
        )
    except orjson.JSONDecodeError:
        raise Problem(422, 'result: not JSON (write an object, e.g. {"id": "r-1"})') from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise Problem(422, f"{where}: {first['msg']}") from None


@router.get("/console/runs/{run_id}/{act}")
async def confirm_control(
    request: Request, run_id: str, act: Literal["cancel", "resume"]
) -> Response:
    return await signed_page(request, "confirm_control.html", _nothing, run_id=run_id, act=act)


async def _nothing(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
    """A confirmation page that needs nothing read: the route names all it shows."""
    return {}


@router.post("/console/runs/{run_id}/{act}")
async def control(request: Request, run_id: str, act: Literal["cancel", "resume"]) -> Response:
    ctx, caller = context_of(request), None
    try:
        caller = await _acting(request)
        reason = _field(await request.form(), "reason")
        answer = Response()
        if act == "cancel":
            verdict = await actions.cancel(
                ctx, caller, answer, run_id, actions.Cancel(reason=reason)
            )
        else:
            verdict = await actions.resume(
                ctx, caller, answer, run_id, actions.Resume(reason=reason)
            )
    except Problem as exc:
        return problem_page(request, exc, caller)
    return _done(request, caller, verdict, answer.status_code, run_id)
