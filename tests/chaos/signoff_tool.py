"""A tool that needs an events-lead's approval and has no preconditions, for the attacks on the
decisions stream: a turn of it is decided with no guarded check before its approval is built,
so a validator that computed from a forged message's facts would do so before any guard.

Register with ``load_registry(["tests.chaos.signoff_tool"])``; the scripted model's scenario
`SCENARIO` asks for it once, then answers with its result.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from callgate.tools.contract import Effect, Identity, Tool, ToolContext

APPROVER_ROLE = "events-lead"
SCENARIO: dict[str, Any] = {
    "description": "one sign-off needing approval, then the answer.",
    "steps": [
        {
            "name": "sign",
            "when": {"assistant_turns": 0},
            "tool_calls": [{"name": "sign_off", "arguments": {"memo": "budget 2027"}}],
        },
        {"name": "answer", "when": {"assistant_turns": 1}, "text": "Signed: {result:sign_off}"},
    ],
}


class SignOffArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memo: str = Field(min_length=1, max_length=200)


async def _sign_off(ctx: ToolContext, args: SignOffArgs, operation_id: str) -> dict[str, Any]:
    return {"signed": args.memo}


def _approval(identity: Identity, args: SignOffArgs) -> str | None:
    return APPROVER_ROLE


sign_off = Tool(
    name="sign_off",
    version="1",
    description="Sign off a memo (needs an events-lead's approval).",
    args_model=SignOffArgs,
    effect=Effect.READ,
    execute=_sign_off,
    approval=_approval,
    timeout_s=2.0,
)

TOOLS: list[Tool[Any]] = [sign_off]
