"""`GET /inbox`: what waits for the caller — pending approvals of a role they hold, and writes
whose outcome stayed unknown that they may resolve — each with exactly what they decide on."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter

from callgate.api.callers import Forbidden, as_person, may_decide, may_resolve
from callgate.api.context import Ctx, Who
from callgate.api.problems import PROBLEM_SCHEMA
from callgate.client import call_view
from callgate.decisions.record import ApprovalRecord

router = APIRouter(tags=["inbox"], responses={code: PROBLEM_SCHEMA for code in (401, 403)})


def approval_item(record: ApprovalRecord) -> dict[str, Any]:
    """A pending approval as the person deciding sees it: the bound arguments and hash."""
    return {
        "approval_id": record.approval_id,
        "run_id": record.run_id,
        "turn": record.turn,
        "call_id": record.call_id,
        "tool": record.tool,
        "tool_version": record.tool_version,
        "arguments": orjson.loads(record.arguments),
        "args_hash": record.args_hash,
        "requested_by": record.requested_by,
        "approver_role": record.approver_role,
        "expires_ms": record.expires_ms,
    }


@router.get("/inbox")
async def inbox(ctx: Ctx, caller: Who) -> dict[str, list[dict[str, Any]]]:
    """Pending approvals and unresolved unknown outcomes the caller may act on."""
    trust = ctx.trust.current()
    try:
        as_person(caller, trust)
    except Forbidden as exc:
        raise await ctx.forbid(None, caller, exc) from None
    approvals = []
    for record in await ctx.desk.pending():
        try:
            may_decide(caller, trust, record)
        except Forbidden:
            continue
        approvals.append(approval_item(record))
    unknown = []
    for call in await ctx.desk.unresolved():
        bound = (
            None
            if call.approval_id is None
            else await ctx.client.ledger.get_approval(call.run_id, call.approval_id)
        )
        try:
            may_resolve(caller, trust, call, bound)
        except Forbidden:
            continue
        unknown.append({"run_id": call.run_id, **call_view(call)})
    return {"approvals": approvals, "unresolved": unknown}
