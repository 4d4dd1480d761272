"""Demo workshop tools over the demo booking service: two reads and one write with approval.

Register with ``load_registry(["callgate.standins.demo.workshop"])``.  The service URL comes from
``CALLGATE_BOOKING_URL`` (tool context config, then environment; default
``http://127.0.0.1:8766``).

``reserve_seat`` is declared `Effect.WRITE` although the service deduplicates by operation
id: callgate never relies on that, so a lost answer goes to `reconcile`, never to a retry.
Policy lives here, not in the descriptions: ``alice`` may reserve only for ``p-alice``,
``bob`` only for ``p-bob``, an ``events-lead`` for anyone; every reservation needs the
approval of an ``events-lead``; reservations on one event are ordered by ``event:<id>``.

Error contract (`callgate.tools.contract`): a 4xx answer is a definitive `ToolError` carrying the
service's message; a 5xx, a dropped connection or a timeout propagates as an ``aiohttp`` /
`TimeoutError` exception, so the executor marks a write ``unknown`` and a read is redone.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from callgate.errors import ToolError
from callgate.standins.demo.http import tool_headers
from callgate.tools.contract import Effect, Identity, Reconciliation, Tool, ToolContext
from callgate.tools.lookup import reconcile_by_lookup

BOOKING_URL_SETTING = "CALLGATE_BOOKING_URL"
DEFAULT_BOOKING_URL = "http://127.0.0.1:8766"
APPROVER_ROLE = "events-lead"
EVENT_ID_PATTERN = r"^ws-[0-9]{1,6}$"
PARTICIPANT_ID_PATTERN = r"^p-[a-z0-9-]{1,32}$"
PARTICIPANT_OF: dict[str, str] = {"alice": "p-alice", "bob": "p-bob"}
"""The one participant each user may act for (an events-lead may act for anyone)."""


class SeatsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(pattern=EVENT_ID_PATTERN, description="Workshop id, e.g. ws-101.")


class ParticipantArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(pattern=EVENT_ID_PATTERN, description="Workshop id, e.g. ws-101.")
    participant_id: str = Field(
        pattern=PARTICIPANT_ID_PATTERN, description="Participant id, e.g. p-alice."
    )


def _url(ctx: ToolContext, path: str) -> str:
    return ctx.setting(BOOKING_URL_SETTING, DEFAULT_BOOKING_URL).rstrip("/") + path


async def _answer(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The body of a 2xx; a 4xx becomes a `ToolError` with the service's message and code;
    a 5xx raises `aiohttp.ClientResponseError` (the outcome is not known)."""
    if 400 <= resp.status < 500:
        try:
            body = await resp.json()
        except (aiohttp.ContentTypeError, ValueError):
            body = {}
        if not isinstance(body, dict):
            body = {}
        message = str(body.get("error") or f"booking service answered {resp.status}")
        raise ToolError(message, code=str(body.get("code") or "rejected"))
    resp.raise_for_status()
    body = await resp.json()
    if not isinstance(body, dict):
        raise ToolError("booking service sent an unexpected answer", code="bad_upstream")
    return body


async def _get(ctx: ToolContext, path: str, operation_id: str = "") -> dict[str, Any]:
    async with ctx.session.get(_url(ctx, path), headers=tool_headers(ctx, operation_id)) as resp:
        return await _answer(resp)


async def _check_seats(ctx: ToolContext, args: SeatsArgs, operation_id: str) -> dict[str, Any]:
    return await _get(ctx, f"/events/{args.event_id}/seats", operation_id)


async def _check_eligibility(
    ctx: ToolContext, args: ParticipantArgs, operation_id: str
) -> dict[str, Any]:
    path = f"/events/{args.event_id}/eligibility/{args.participant_id}"
    return await _get(ctx, path, operation_id)


async def _reserve(ctx: ToolContext, args: ParticipantArgs, operation_id: str) -> dict[str, Any]:
    """One POST carrying the operation id as its ``Idempotency-Key``; never retried here (the
    executor decides)."""
    if not operation_id:
        raise ToolError("a reservation needs an operation id", code="no_operation_id")
    payload = {"event_id": args.event_id, "participant_id": args.participant_id}
    headers = {**tool_headers(ctx, operation_id), **ctx.idempotency_headers(operation_id)}
    async with ctx.session.post(_url(ctx, "/reservations"), json=payload, headers=headers) as resp:
        return await _answer(resp)


async def _reconcile_reserve(
    ctx: ToolContext, args: ParticipantArgs, operation_id: str
) -> Reconciliation:
    """Ask the service for the reservation made under ``operation_id``.

    200 → applied (the reservation is the result, as ``execute`` would have returned it);
    404 → not applied; anything else — 5xx, timeout, unreachable, or a reservation for
    other arguments, which only a human can sort out — stays unknown.
    """
    if not operation_id:
        return Reconciliation("unknown")
    return await reconcile_by_lookup(
        ctx,
        _url(ctx, f"/reservations/{operation_id}"),
        matches=lambda made: (
            (made.get("event_id"), made.get("participant_id"))
            == (args.event_id, args.participant_id)
        ),
        headers=tool_headers(ctx, operation_id),
        timeout_s=reserve_seat.timeout_s,
    )


async def _reserve_preconditions(ctx: ToolContext, args: ParticipantArgs) -> str | None:
    """Eligible and a seat left, asked of the service (a 404 raises a `ToolError`, which
    counts as a failed precondition; a transport error propagates so the check is retried)."""
    eligibility = await _check_eligibility(ctx, args, "")
    if not eligibility.get("eligible"):
        reason = eligibility.get("reason") or "not eligible"
        return f"{args.participant_id} is not eligible for {args.event_id}: {reason}"
    seats = await _check_seats(ctx, SeatsArgs(event_id=args.event_id), "")
    if int(seats.get("available", 0)) <= 0:
        return f"no seats left for {args.event_id}"
    return None


def _authorize_reserve(identity: Identity, args: ParticipantArgs) -> str | None:
    if APPROVER_ROLE in identity.roles:
        return None
    if PARTICIPANT_OF.get(identity.user) == args.participant_id:
        return None
    return f"user {identity.user!r} may not reserve a seat for {args.participant_id}"


def _approval_reserve(identity: Identity, args: ParticipantArgs) -> str | None:
    """Every reservation is approved by an events-lead — also one an events-lead requests,
    so nobody approves their own spending of a seat."""
    return APPROVER_ROLE


def _event_resource(args: ParticipantArgs) -> str:
    return f"event:{args.event_id}"


check_seats = Tool(
    name="check_seats",
    version="1",
    description="Seats of a workshop: capacity, reserved and available.",
    args_model=SeatsArgs,
    effect=Effect.READ,
    execute=_check_seats,
    timeout_s=2.0,
)

check_eligibility = Tool(
    name="check_eligibility",
    version="1",
    description="Whether a participant may attend a workshop, and why not.",
    args_model=ParticipantArgs,
    effect=Effect.READ,
    execute=_check_eligibility,
    timeout_s=2.0,
)

reserve_seat = Tool(
    name="reserve_seat",
    version="1",
    description="Reserve one workshop seat for a participant (needs a human's approval).",
    args_model=ParticipantArgs,
    effect=Effect.WRITE,
    execute=_reserve,
    reconcile=_reconcile_reserve,
    resource_key=_event_resource,
    authorize=_authorize_reserve,
    preconditions=_reserve_preconditions,
    approval=_approval_reserve,
    timeout_s=5.0,
)

TOOLS: list[Tool[Any]] = [check_seats, check_eligibility, reserve_seat]
