"""Demo idempotent write over the demo booking service: ``hold_seat``.

Register with ``load_registry(["callgate.standins.demo.holds"])`` (usually next to
``callgate.standins.demo.workshop``, whose booking service and policy it shares).

``hold_seat`` is declared `Effect.IDEMPOTENT_WRITE`: the booking service deduplicates
reservations by operation id, so after a lost answer or a crash the executor sends the same
request again with the same operation id instead of asking a human (compare ``reserve_seat``,
a plain write that is reconciled, never replayed).  It needs no approval; the same scope rule
as ``reserve_seat`` applies (a user holds seats only for themselves, an events-lead for anyone).

``contact_email`` is personal data, marked sensitive: the tool echoes it in its result (where
the confirmation goes), and it must never reach an event, a trace or a process log.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from callgate.standins.demo.workshop import (
    EVENT_ID_PATTERN,
    PARTICIPANT_ID_PATTERN,
    ParticipantArgs,
    _authorize_reserve,
    _reconcile_reserve,
    _reserve,
)
from callgate.tools.contract import Effect, Identity, Reconciliation, Tool, ToolContext


class HoldArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(pattern=EVENT_ID_PATTERN, description="Workshop id, e.g. ws-200.")
    participant_id: str = Field(
        pattern=PARTICIPANT_ID_PATTERN, description="Participant id, e.g. p-alice."
    )
    contact_email: str | None = Field(
        default=None, max_length=254, description="Where the confirmation is sent (optional)."
    )


def _participant(args: HoldArgs) -> ParticipantArgs:
    return ParticipantArgs(event_id=args.event_id, participant_id=args.participant_id)


async def _hold(ctx: ToolContext, args: HoldArgs, operation_id: str) -> dict[str, Any]:
    reservation = await _reserve(ctx, _participant(args), operation_id)
    if args.contact_email is None:
        return reservation
    return {**reservation, "contact_email": args.contact_email}


async def _reconcile_hold(ctx: ToolContext, args: HoldArgs, operation_id: str) -> Reconciliation:
    answer = await _reconcile_reserve(ctx, _participant(args), operation_id)
    if answer.found != "applied" or args.contact_email is None or answer.result is None:
        return answer
    return Reconciliation("applied", {**answer.result, "contact_email": args.contact_email})


def _authorize_hold(identity: Identity, args: HoldArgs) -> str | None:
    return _authorize_reserve(identity, _participant(args))


def _event_resource(args: HoldArgs) -> str:
    return f"event:{args.event_id}"


hold_seat = Tool(
    name="hold_seat",
    version="1",
    description="Hold one workshop seat for a participant; safe to repeat (idempotent).",
    args_model=HoldArgs,
    effect=Effect.IDEMPOTENT_WRITE,
    execute=_hold,
    reconcile=_reconcile_hold,
    resource_key=_event_resource,
    authorize=_authorize_hold,
    sensitive_fields=frozenset({"contact_email"}),
    timeout_s=5.0,
)

TOOLS: list[Tool[Any]] = [hold_seat]
