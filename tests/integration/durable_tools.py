"""The write tools of the durability tests (tests/integration/test_write_durability.py).

``reserve_unapproved`` is the workshop's ``reserve_seat`` — a plain write over the demo booking
service, whose ``/_stats`` counts every reservation request it receives — without the approval
its policy asks, so a test need not sign one.  ``AT_SEND`` runs just before its request goes
out: where a test looks at what a replica holds at that moment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from callgate.standins.demo.workshop import ParticipantArgs, _reserve, reserve_seat
from callgate.tools.contract import Tool, ToolContext

AT_SEND: list[Callable[[ToolContext], None]] = []
"""Called with the call's context right before its request is sent."""


async def _reserve_now(ctx: ToolContext, args: ParticipantArgs, operation_id: str) -> Any:
    for probe in AT_SEND:
        probe(ctx)
    return await _reserve(ctx, args, operation_id)


reserve_unapproved = replace(
    reserve_seat, name="reserve_unapproved", execute=_reserve_now, approval=lambda *_: None
)

TOOLS: list[Tool[Any]] = [reserve_unapproved]
MODULE = __name__
