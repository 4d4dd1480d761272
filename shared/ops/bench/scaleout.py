"""Scenario ``scale-out``: 1, 2, 4 and 8 executor processes on 50 ms tools.

The executors scenario's batches (allowed `bench_sleep` calls written into the ledger, their
exec messages put on the stream at once) with more executors each time, started beside the
ones already running.  With 50 ms tools an executor's work is mostly waiting, so adding
processes should add throughput until something shared is saturated: the machine's cores or
Redis's one thread.  Beside each rate: the share of one core Redis used while the batch ran,
and the executors' CPU per call, so the point where the curve bends says which it was.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from callgate.ops.bench.executors import batch
from callgate.ops.bench.harness import NO_WORKERS, Deployment, cpu_seconds
from callgate.ops.stack import Progress

COUNTS = (1, 2, 4, 8)
BEND = 1.5
"""Doubling the executors counts as still paying while throughput grows at least this much."""


async def measure(redis_url: str, calls: int, progress: Progress) -> dict[str, Any]:
    """Calls/s, Redis's CPU share and the executors' CPU per call at each count."""
    curve: dict[str, dict[str, float]] = {}
    replicas = {**NO_WORKERS, "executor": 1}
    async with Deployment(redis_url, replicas=replicas, progress=progress) as deployment:
        await deployment.wait_serving("executor")
        running = 1
        for count in COUNTS:
            names = [f"executor-{n}" for n in range(running + 1, count + 1)]
            for name in names:  # started together, then waited for: imports overlap
                deployment.add_worker("executor", name)
            for name in names:
                await deployment.wait_serving(name)
            running = count
            await batch(deployment, min(calls, 200))  # warm the new processes up
            progress(f"scale-out: {count} executors, {calls} calls of 50 ms")
            curve[str(count)] = await _point(deployment, calls)
    return summary(curve)


async def _point(deployment: Deployment, calls: int) -> dict[str, float]:
    before, started = await cpu_seconds(deployment), time.monotonic()
    measured = await batch(deployment, calls)
    after, wall = await cpu_seconds(deployment), time.monotonic() - started
    executors = sum(after[n] - before[n] for n in after if n.startswith("executor"))
    return {
        "calls_per_s": measured["calls_per_s"],
        "redis_cpu_share": (after["redis"] - before["redis"]) / wall if wall > 0 else 0.0,
        "executor_cpu_ms_per_call": executors * 1000 / calls,
        "in_flight_mean": measured["in_flight_mean"],
    }


def summary(curve: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The curve, each doubling's gain, and the first count whose doubling gains < `BEND`."""
    rate = {c: curve[str(c)]["calls_per_s"] for c in COUNTS}
    gains = {
        f"{b}_vs_{a}": (rate[b] / rate[a] if rate[a] else 0.0)
        for a, b in itertools.pairwise(COUNTS)
    }
    bend = next((COUNTS[i] for i, g in enumerate(gains.values()) if g < BEND), None)
    return {
        "curve": curve,
        **gains,
        "eight_calls_per_s": rate[COUNTS[-1]],
        "bends_after": bend,
        "redis_cpu_share_at_bend": curve[str(bend)]["redis_cpu_share"] if bend else None,
    }
