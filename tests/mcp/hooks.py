"""Functions a test deployment names in its MCP server list (``module:function``): the local
policy's authorization and a local lookup that asks the test server's own record."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from callgate.tools.contract import Identity, Reconciliation, ToolContext

STATE_SETTING = "CALLGATE_TEST_MCP_STATE"
"""The test server's state folder, for `find_cancellation`."""


def only_alice(identity: Identity, args: BaseModel) -> str | None:
    return None if identity.user == "alice" else "only alice may keep notes"


async def find_cancellation(ctx: ToolContext, args: BaseModel, operation_id: str) -> Reconciliation:
    """Whether ``cancel_order`` committed under ``operation_id``, from the server's record."""
    path = Path(ctx.setting(STATE_SETTING, os.curdir)) / "events.jsonl"
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event.get("tool") == "cancel_order" and event.get("operation_id") == operation_id:
            return Reconciliation("applied", {"cancelled": event["order"], "found_by": "local"})
    return Reconciliation("not_applied")


def not_async(ctx: ToolContext, args: BaseModel, operation_id: str) -> Reconciliation:
    return Reconciliation("unknown")
