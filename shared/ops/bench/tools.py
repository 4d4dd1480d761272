"""The benchmark's tools: no network I/O, so what is measured is callgate, not a service.

``bench_read`` answers at once (the zero-latency tool); ``bench_sleep`` waits 50 ms like an
I/O-bound call (executor scaling and recovery).  Both are reads: a crash redoes them.
``bench_write`` is an idempotent write that also answers at once (its operation id would make
a retry harmless), each key a resource of its own so a turn's two run side by side: what a
write's durability costs (``throughput-replica``).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import Field

from callgate.tools.contract import Effect, Tool, ToolContext
from callgate.tools.decorator import tool

SLEEP_MS = 50

Key = Annotated[str, Field(min_length=1, max_length=64, description="What to read, e.g. k1.")]


@tool(effect=Effect.READ)
async def bench_read(ctx: ToolContext, key: Key) -> dict[str, Any]:
    """Read one value by key; answers at once."""
    return {"key": key, "value": f"value of {key}"}


@tool(effect=Effect.READ, description=f"Read one value by key from a slow store ({SLEEP_MS} ms).")
async def bench_sleep(ctx: ToolContext, key: Key) -> dict[str, Any]:
    await asyncio.sleep(SLEEP_MS / 1000)
    return {"key": key, "slept_ms": SLEEP_MS}


@tool(effect=Effect.IDEMPOTENT_WRITE, resource_key=lambda args: f"bench:{args.key}")
async def bench_write(ctx: ToolContext, key: Key) -> dict[str, Any]:
    """Store one value by key; answers at once."""
    return {"key": key, "stored": True}


TOOLS: list[Tool[Any]] = [bench_read, bench_sleep, bench_write]
MODULE = __name__
