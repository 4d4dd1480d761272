"""Demo tools whose own code fails, for the "tool error" case of the regression catalogue.

``read_fortune`` (a read) raises ``RuntimeError`` every time, quoting a URL with a password,
as careless code does; the model must be told, under that call's id, with the password masked,
and the turn must go on.  ``send_postcard`` (a write) raises after its request has left: its
outcome is ``unknown`` with the exception on record, and its ``reconcile`` finds the postcard
delivered, so the model is told that result and the write is never replayed.

Test deployments register this module (``callgate.standins.demo.FAULTY``); demos do not.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from callgate.tools.contract import Effect, Reconciliation, Tool, ToolContext
from callgate.tools.decorator import tool

PLANTED_PASSWORD = "fortune-hunter2"
"""In the read's exception text; it must reach neither the ledger, the events nor the model."""


@tool(effect=Effect.READ)
async def read_fortune(
    ctx: ToolContext, sign: Annotated[str, Field(min_length=1, max_length=32)]
) -> dict[str, Any]:
    """Today's fortune for a star sign.

    Args:
        sign: Star sign, e.g. Leo.
    """
    raise RuntimeError(
        f"fortune backend crashed reading redis://fortune:{PLANTED_PASSWORD}@db:6379/0"
    )


async def _find_postcard(ctx: ToolContext, args: Any, operation_id: str) -> Reconciliation:
    return Reconciliation("applied", {"postcard": "delivered", "to": args.to})


@tool(effect=Effect.WRITE, reconcile=_find_postcard)
async def send_postcard(
    ctx: ToolContext,
    to: Annotated[str, Field(min_length=1, max_length=64)],
    text: Annotated[str, Field(min_length=1, max_length=280)],
    operation_id: str,
) -> dict[str, Any]:
    """Send a postcard to someone.

    Args:
        to: Who receives the postcard.
        text: What the postcard says.
    """
    raise RuntimeError(f"printer jammed after postcard {operation_id} left")


TOOLS: list[Tool[Any]] = [read_fortune, send_postcard]
