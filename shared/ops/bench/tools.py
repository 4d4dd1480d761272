"""The benchmark's tools: no network I/O, so what is measured is callgate, not a service.

``bench_read`` answers at once (the zero-latency tool); ``bench_sleep`` waits 50 ms like an
I/O-bound call (executor scaling and recovery).  Both are reads: a crash redoes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from callgate.tools.contract import Effect, Tool, ToolContext

SLEEP_MS = 50


class KeyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, max_length=64, description="What to read, e.g. k1.")


async def _read(ctx: ToolContext, args: KeyArgs, operation_id: str) -> dict[str, Any]:
    return {"key": args.key, "value": f"value of {args.key}"}


async def _sleep(ctx: ToolContext, args: KeyArgs, operation_id: str) -> dict[str, Any]:
    await asyncio.sleep(SLEEP_MS / 1000)
    return {"key": args.key, "slept_ms": SLEEP_MS}


bench_read = Tool(
    name="bench_read",
    version="1",
    description="Read one value by key; answers at once.",
    args_model=KeyArgs,
    effect=Effect.READ,
    execute=_read,
)

bench_sleep = Tool(
    name="bench_sleep",
    version="1",
    description=f"Read one value by key from a slow store ({SLEEP_MS} ms).",
    args_model=KeyArgs,
    effect=Effect.READ,
    execute=_sleep,
)

TOOLS: list[Tool[Any]] = [bench_read, bench_sleep]
MODULE = __name__
