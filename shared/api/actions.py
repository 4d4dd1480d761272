"""The people's actions: approve, deny, resolve, cancel, resume — and a service's reply.

Every decision goes through `ApprovalDesk`, signed with the server's delegate key for the
verified caller, onto the run's decisions stream; the validator verifies it exactly as it
verifies one from Slack or the CLI, applies it or refuses it, and says which in the run's trace.
The answer is that verdict: 200 applied, 409 refused (with the validator's reason), 202 posted
but no verdict within ``verdict_timeout_s``.  The checks before posting (`callgate.api.callers`)
only spare a caller a decision that could not apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ConfigDict, Field

from callgate.api.callers import (
    Caller,
    Forbidden,
    may_control,
    may_decide,
    may_relay,
    may_reply,
    may_resolve,
)
from callgate.api.context import ApiContext, Ctx, Who
from callgate.api.problems import PROBLEM_SCHEMA, Problem
from callgate.envelopes import SignedDecision
from callgate.errors import JobFailedError
from callgate.states import CallState

router = APIRouter(
    tags=["actions"], responses={code: PROBLEM_SCHEMA for code in (401, 403, 404, 409, 422)}
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Decide(_Body):
    """Approve or deny, as the caller."""

    reason: str | None = Field(default=None, max_length=2000)
    """Why; a denial's reason is what the model is told."""
    args_hash: str | None = Field(default=None, max_length=128)
    """The argument hash you were shown (GET /inbox); default: the approval's own.  A hash
    that is not the approval's is refused: the arguments changed."""


class Cancel(_Body):
    """Cancel the run: no model turn starts after it; a write in flight keeps its outcome."""

    reason: str | None = Field(default=None, max_length=2000)


class Resume(Cancel):
    """Resume a run paused incomplete or handed off, with the same or a larger budget."""

    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """The new turn budget (default: one more turn than it used)."""
    deadline_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    """A new wall-clock deadline, from the moment the resume applies."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """The new token budget (usage so far is kept)."""


class Resolve(_Body):
    """A write whose outcome stayed unknown: it was applied, it was not, or ask again."""

    outcome: Literal["applied", "not_applied", "recheck"]
    result: dict[str, object] | None = None
    """With ``applied``: the result the model is told (default: an empty object)."""
    reason: str | None = Field(default=None, max_length=2000)


class Reply(_Body):
    """A follow-up input for a completed run: its next turn, in the same history."""

    input: str = Field(min_length=1, max_length=100_000)
    policy: Literal["reject", "enqueue"] = "reject"
    """While the run is busy: refuse (409), or admit once when it next completes."""
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """Raise the run's turn budget (it counts across every input)."""


class Verdict(BaseModel):
    """What the validator did with the decision the server posted."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    applied: bool | None
    """True: applied; None: posted, no verdict yet (look at the run's events)."""
    event: str | None = None
    decision_id: str


async def door(
    ctx: ApiContext, run_id: str, caller: Caller, rule: Callable[..., None], *facts: Any
) -> None:
    """The door's checks before anything is signed — ``rule(caller, trust, *facts)``, and
    whether this server's delegate may speak for the caller at all; a failure is a 403,
    said in the run's trace."""
    trust = ctx.trust.current()
    try:
        rule(caller, trust, *facts)
        may_relay(caller, trust, ctx.delegate.key_id)
    except Forbidden as exc:
        raise await ctx.forbid(run_id, caller, exc) from None


async def verdict(
    ctx: ApiContext, message: SignedDecision, after: str, response: Response
) -> Verdict:
    outcome = await ctx.desk.wait_outcome(message, after, ctx.api.verdict_timeout_s)
    if outcome is None:
        response.status_code = 202
        return Verdict(applied=None, decision_id=message.msg_id)
    if not outcome.applied:
        raise Problem(409, f"refused: {outcome.reason}")
    return Verdict(applied=True, event=outcome.event, decision_id=message.msg_id)


@router.post("/approvals/{approval_id}/{decision}", response_model=Verdict)
async def decide(
    ctx: Ctx,
    caller: Who,
    response: Response,
    approval_id: str,
    decision: Literal["approve", "deny"],
    body: Annotated[Decide | None, Body()] = None,
) -> Verdict:
    """Approve or deny a pending approval, as yourself."""
    body = body or Decide()
    record = await ctx.desk.find(approval_id)
    if record is None:
        raise Problem(
            404,
            f"no pending approval {approval_id} (decided, expired or unknown; "
            "GET /inbox lists what waits)",
        )
    await door(ctx, record.run_id, caller, may_decide, record)
    after = await ctx.desk.last_event_id(record.run_id)
    message = await ctx.desk.post(
        record,
        decision,
        ctx.delegate,
        person=caller.name,
        reason=body.reason,
        args_hash=body.args_hash,
    )
    return await verdict(ctx, message, after, response)


@router.post("/runs/{run_id}/calls/{call_id}/resolve", response_model=Verdict)
async def resolve(
    ctx: Ctx, caller: Who, response: Response, run_id: str, call_id: str, body: Resolve
) -> Verdict:
    """Resolve a write whose outcome stayed unknown: applied, not applied, or recheck."""
    call = await ctx.client.ledger.get_call(run_id, call_id)
    if call is None or call.state != CallState.UNRESOLVED:
        shown = "no such call" if call is None else f"it is {call.state.value}"
        raise Problem(404, f"call {call_id} of run {run_id} is not unresolved ({shown})")
    record = (
        None
        if call.approval_id is None
        else await ctx.client.ledger.get_approval(run_id, call.approval_id)
    )
    await door(ctx, run_id, caller, may_resolve, call, record)
    after = await ctx.desk.last_event_id(run_id)
    message = await ctx.desk.resolve(
        call, body.outcome, ctx.delegate, result=body.result, reason=body.reason, person=caller.name
    )
    return await verdict(ctx, message, after, response)


async def _control(
    ctx: ApiContext,
    caller: Caller,
    run_id: str,
    act: Literal["cancel", "resume"],
    budget: dict[str, float | str | None],
    response: Response,
) -> Verdict:
    run = await ctx.client.run(run_id)
    if run is None:
        raise Problem(404, f"no run {run_id}: check the id (GET /runs lists them)")
    await door(ctx, run_id, caller, may_control, run)
    after = await ctx.desk.last_event_id(run_id)
    message = await ctx.desk.control(run, act, ctx.delegate, budget=budget, person=caller.name)
    return await verdict(ctx, message, after, response)


@router.post("/runs/{run_id}/cancel", response_model=Verdict)
async def cancel(
    ctx: Ctx,
    caller: Who,
    response: Response,
    run_id: str,
    body: Annotated[Cancel | None, Body()] = None,
) -> Verdict:
    """Cancel a run (its user, or an operator); a write in flight keeps its true outcome."""
    return await _control(ctx, caller, run_id, "cancel", (body or Cancel()).model_dump(), response)


@router.post("/runs/{run_id}/resume", response_model=Verdict)
async def resume(
    ctx: Ctx,
    caller: Who,
    response: Response,
    run_id: str,
    body: Annotated[Resume | None, Body()] = None,
) -> Verdict:
    """Resume a run paused incomplete or handed off, with the same or a larger budget."""
    return await _control(ctx, caller, run_id, "resume", (body or Resume()).model_dump(), response)


@router.post("/runs/{run_id}/reply")
async def reply(
    ctx: Ctx, caller: Who, response: Response, run_id: str, body: Reply
) -> dict[str, object]:
    """Send a completed run a follow-up input (a submitting service that may act for its
    identity); 200 admitted, 409 refused, 202 no verdict yet."""
    await ctx.readable_run(run_id, caller, may_reply)
    reply_id = await ctx.client.reply(
        run_id, body.input, policy=body.policy, max_turns=body.max_turns
    )
    try:
        result = await ctx.client.reply_result(reply_id, ctx.api.verdict_timeout_s)
    except JobFailedError as exc:
        raise Problem(409, str(exc)) from None
    except TimeoutError:
        response.status_code = 202
        return {"reply_id": reply_id, "admitted": None}
    return {"reply_id": reply_id, **result}
