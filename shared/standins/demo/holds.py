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

from pydantic import Field

from callgate.standins.demo.workshop import (
    EVENT_ID_PATTERN,
    ParticipantArgs,
    _authorize_reserve,
    _event_resource,
    _reconcile_reserve,
    _reserve,
)
from callgate.tools.contract import Effect, Reconciliation, Tool, ToolContext


# A reservation's arguments (so reserve_seat's hooks apply as they are) plus a contact; a
# comment, since a docstring would become part of the schema the model sees.
class HoldArgs(ParticipantArgs):
    # Redeclared only for its example: holds are taken on the open lab.
    event_id: str = Field(pattern=EVENT_ID_PATTERN, description="Workshop id, e.g. ws-200.")
    contact_email: str | None = Field(
        default=None, max_length=254, description="Where the confirmation is sent (optional)."
    )


async def _hold(ctx: ToolContext, args: HoldArgs, operation_id: str) -> dict[str, Any]:
    reservation = await _reserve(ctx, args, operation_id)
    if args.contact_email is None:
        return reservation
    return {**reservation, "contact_email": args.contact_email}


async def _reconcile_hold(ctx: ToolContext, args: HoldArgs, operation_id: str) -> Reconciliation:
    answer = await _reconcile_reserve(ctx, args, operation_id)
    if answer.found != "applied" or args.contact_email is None or answer.result is None:
        return answer
    return Reconciliation("applied", {**answer.result, "contact_email": args.contact_email})


hold_seat = Tool(
    name="hold_seat",
    version="1",
    description="Hold one workshop seat for a participant; safe to repeat (idempotent).",
    args_model=HoldArgs,
    effect=Effect.IDEMPOTENT_WRITE,
    execute=_hold,
    reconcile=_reconcile_hold,
    resource_key=_event_resource,
    authorize=_authorize_reserve,
    sensitive_fields=frozenset({"contact_email"}),
    timeout_s=5.0,
)

TOOLS: list[Tool[Any]] = [hold_seat]
