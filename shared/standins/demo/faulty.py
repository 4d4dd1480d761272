"""Demo tools whose own code fails, for the "tool error" case of the regression catalogue.

``read_fortune`` (a read) raises ``RuntimeError`` every time, quoting a URL with a password,
as careless code does; the model must be told, under that call's id, with the password masked,
and the turn must go on.  ``send_postcard`` (a write) raises after its request has left: its
outcome is ``unknown`` with the exception on record, and its ``reconcile`` finds the postcard
delivered, so the model is told that result and the write is never replayed.

Test deployments register this module (``callgate.standins.demo.FAULTY``); demos do not.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from callgate.tools.contract import Effect, Reconciliation, Tool, ToolContext

PLANTED_PASSWORD = "fortune-hunter2"
"""In the read's exception text; it must reach neither the ledger, the events nor the model."""


class FortuneArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sign: str = Field(min_length=1, max_length=32, description="Star sign, e.g. Leo.")


class PostcardArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(min_length=1, max_length=64, description="Who receives the postcard.")
    text: str = Field(min_length=1, max_length=280, description="What the postcard says.")


async def _read_fortune(ctx: ToolContext, args: FortuneArgs, operation_id: str) -> dict[str, Any]:
    raise RuntimeError(
        f"fortune backend crashed reading redis://fortune:{PLANTED_PASSWORD}@db:6379/0"
    )


async def _send_postcard(
    ctx: ToolContext, args: PostcardArgs, operation_id: str
) -> dict[str, Any]:
    raise RuntimeError(f"printer jammed after postcard {operation_id} left")


async def _find_postcard(
    ctx: ToolContext, args: PostcardArgs, operation_id: str
) -> Reconciliation:
    return Reconciliation("applied", {"postcard": "delivered", "to": args.to})


read_fortune = Tool(
    name="read_fortune",
    version="1",
    description="Today's fortune for a star sign.",
    args_model=FortuneArgs,
    effect=Effect.READ,
    execute=_read_fortune,
)

send_postcard = Tool(
    name="send_postcard",
    version="1",
    description="Send a postcard to someone.",
    args_model=PostcardArgs,
    effect=Effect.WRITE,
    execute=_send_postcard,
    reconcile=_find_postcard,
)

TOOLS: list[Tool[Any]] = [read_fortune, send_postcard]
