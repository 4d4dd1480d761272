"""`POST /runs`, `GET /runs`, `GET /runs/{run_id}`: start runs, list them, view one.

Starting goes through `CallgateClient.submit`, the one submit path: the spec is validated, the
job is signed with the server's submitter key and the ingress verifies it as it verifies every
job.  The caller (a submitting service) must hold grants covering the identity it asks for.
Submitting is idempotent by run id: the same spec again answers 200 with the run; another spec
under a taken id answers 409 and changes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel

from callgate.api.callers import Caller, Forbidden, may_read, may_submit
from callgate.api.context import Ctx, Who
from callgate.api.listing import RunFilter, decode_cursor, encode_cursor, page
from callgate.api.problems import PROBLEM_SCHEMA, Problem
from callgate.auth.trust import TrustConfig
from callgate.client import run_view
from callgate.logs import log_fields
from callgate.ops.inspect_render import run_row
from callgate.records import RunRecord
from callgate.runspec import parse_spec, spec_hash, with_run_id
from callgate.states import RunState

log = logging.getLogger("callgate.api")
router = APIRouter(tags=["runs"], responses={code: PROBLEM_SCHEMA for code in (401, 403, 422)})


class Started(BaseModel):
    run_id: str
    created: bool
    """False when the run id was submitted before with this same spec."""


class RunPage(BaseModel):
    runs: list[dict[str, Any]]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; None on the last."""


SPEC_DOC = (
    "A run spec (README: Run spec): api, model, input, identity, allowed_tools, and "
    "optionally run_id, instructions, budgets. The identity must be one the calling "
    "service's grants cover."
)


@router.post(
    "/runs",
    status_code=202,
    response_model=Started,
    responses={409: PROBLEM_SCHEMA, 200: {"model": Started}},
)
async def start_run(
    ctx: Ctx,
    caller: Who,
    response: Response,
    spec: Annotated[dict[str, Any], Body(description=SPEC_DOC)],
) -> Started:
    """Start a run (202), or find the same one already started (200)."""
    parsed = with_run_id(parse_spec(spec))
    assert parsed.run_id is not None
    payload = parsed.model_dump(mode="json", exclude_none=True)
    try:
        may_submit(caller, ctx.trust.current(), payload.get("identity"), parsed.run_id)
    except Forbidden as exc:
        raise await ctx.forbid(None, caller, exc) from None
    minted = spec.get("run_id") is None  # a fresh id names no run yet: nothing to read
    existing = None if minted else await ctx.client.run(parsed.run_id)
    if existing is not None:
        same = spec_hash(parse_spec(payload), payload.get("identity") or {})
        ours = f"service:{ctx.client.signer().key_id}"
        if (existing.spec_hash, existing.vouched_by) != (same, ours):
            raise Problem(
                409,
                f"run {parsed.run_id} exists with another spec, identity or "
                "submitter: submit under a new run id",
            )
        response.status_code = 200
        return Started(run_id=parsed.run_id, created=False)
    await ctx.client.submit(parsed)
    # The run records this server as its voucher (the ingress knows one); who asked is here.
    log.info(
        "run submitted", extra=log_fields(run_id=parsed.run_id, caller=caller.name, via=caller.via)
    )
    return Started(run_id=parsed.run_id, created=True)


def _statuses(text: str | None) -> frozenset[RunState] | None:
    if not text:
        return None
    try:
        return frozenset(RunState(part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
        known = ", ".join(state.value for state in RunState)
        raise Problem(422, f"status: use a comma-separated list of {known}") from None


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def _readable(caller: Caller, trust: TrustConfig, run: RunRecord) -> bool:
    try:
        may_read(caller, trust, run)
    except Forbidden:
        return False
    return True


@router.get("/runs", response_model=RunPage)
async def list_runs(
    ctx: Ctx,
    caller: Who,
    status: Annotated[str | None, Query(description="comma-separated run states")] = None,
    tool: Annotated[str | None, Query(description="runs allowed this tool")] = None,
    user: Annotated[str | None, Query(description="runs acting for this user")] = None,
    since: Annotated[datetime | None, Query(description="created at or after (ISO 8601)")] = None,
    until: Annotated[datetime | None, Query(description="created at or before (ISO 8601)")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the page before")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> RunPage:
    """Runs newest first, filtered, one page at a time."""
    try:
        after = None if cursor is None else decode_cursor(cursor)
    except ValueError as exc:
        raise Problem(422, f"cursor: {exc}") from None
    trust = ctx.trust.current()
    wanted = RunFilter(
        _statuses(status),
        tool,
        user,
        _ms(since) or 0,
        _ms(until),
        readable=lambda run: _readable(caller, trust, run),
    )
    runs, more = await page(
        ctx.client.ledger,
        ctx.settings.partitions,
        wanted,
        after,
        min(limit, ctx.api.max_page),
        ctx.settings.tenant,
    )
    rows = [{**run_row(run), "allowed_tools": run.allowed_tools} for run in runs]
    return RunPage(runs=rows, next_cursor=None if more is None else encode_cursor(more))


@router.get("/runs/{run_id}", responses={404: PROBLEM_SCHEMA})
async def view_run(ctx: Ctx, caller: Who, run_id: str) -> dict[str, Any]:
    """The run and every call: what was asked, decided and what came of it."""
    run = await ctx.readable_run(run_id, caller)
    return run_view(run, await ctx.client.ledger.run_calls(run_id, run.turn))
