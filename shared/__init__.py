"""callgate: a durable, distributed runtime for LLM agent tool-call loops on Redis Streams.

The public API a deployment and its tools need; everything else lives in named packages
(`callgate.ledger`, `callgate.streams`, `callgate.tools`, `callgate.providers`, …).  This
folder is installed as ``callgate``; imported under any other name it refuses, so a user's
own ``shared`` package can never be mistaken for it (or it for theirs).
"""

from __future__ import annotations

if __name__ != "callgate":
    raise ImportError(f"this folder is the callgate package; import callgate, not {__name__}")

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.errors import ToolError
from callgate.runspec import RunSpec
from callgate.tools.contract import Effect, Identity, Reconciliation, Tool, ToolContext
from callgate.tools.decorator import tool
from callgate.tools.lookup import reconcile_by_lookup

__all__ = [
    "CallgateClient",
    "Effect",
    "Identity",
    "Reconciliation",
    "RunSpec",
    "Settings",
    "Tool",
    "ToolContext",
    "ToolError",
    "reconcile_by_lookup",
    "tool",
]
