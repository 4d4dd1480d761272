"""Throughput of the same pipeline under two other settings, beside the default run.

* ``throughput-redis-py``: the ledger's hot commands over plain redis-py
  (``CALLGATE_WIRE=redis-py``) instead of the bare hiredis connection: what the fast
  transport earns.
* ``throughput-aof``: a private Redis with the append-only file written and fsynced on every
  write (``appendfsync always``), the setting that makes a recorded intent survive a power
  cut (README: Performance): what that durability costs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from callgate.ops.bench import throughput
from callgate.ops.bench.harness import Deployment
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.stack import Progress

VARIANTS = ("throughput-redis-py", "throughput-aof")


async def measure(
    variant: str, redis_url: str, api: str, runs: int, progress: Progress
) -> dict[str, Any]:
    """Tool calls per second (and CPU per call) of ``runs`` runs under ``variant``."""
    if variant == "throughput-redis-py":
        env = {"CALLGATE_WIRE": "redis-py"}
        return await _pipeline(redis_url, env, api, runs, progress, variant)
    aof = await asyncio.to_thread(EmbeddedRedis(appendonly=True).start)
    try:
        progress(f"{variant}: private Redis, appendonly yes, appendfsync always")
        return await _pipeline(aof.url, {}, api, runs, progress, variant)
    finally:
        await asyncio.to_thread(aof.__exit__, None, None, None)


async def _pipeline(
    redis_url: str, env: dict[str, str], api: str, runs: int, progress: Progress, name: str
) -> dict[str, Any]:
    async with Deployment(redis_url, env=env, progress=progress) as deployment:
        progress(f"{name}: {runs} runs x {throughput.TURNS} turns x "
                 f"{throughput.CALLS_PER_TURN} calls")
        measured = await throughput.pipeline(deployment, api, runs)
    wanted = ("calls", "seconds", "calls_per_s", "cpu_ms_per_call", "redis_commands_per_call")
    return {name: measured[name] for name in wanted}
