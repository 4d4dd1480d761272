"""Scenario 2: tool calls per second with many runs at once, beside the batched floor.

``runs`` concurrent runs × 5 turns × 2 parallel reads per turn (bench-parallel.json), with
the in-process provider, every worker kind and Redis sharing this machine.  Timed from the
first submission (through arq and the ingress worker, as a user submits) to the last run's
final state write (its ``updated_ms``).  The CPU every process spent per tool call meanwhile
(workers, Redis, this process) says where the time goes, and is steadier than calls/s on a
machine others share.  The workers' Python CPU is also given without the benchmark's model
stand-in, which runs inside model_turn (`provider.StandInCpu`): the runtime's own cost.
"""

from __future__ import annotations

from typing import Any

from callgate.ops.bench import cost
from callgate.ops.bench.floor import FloorRelay
from callgate.ops.bench.harness import (
    NOT_WORKERS,
    Deployment,
    cpu_seconds,
    run_spec,
    stand_in_cpu_s,
)
from callgate.ops.stack import Progress

SCENARIO = "bench-parallel"
WARM_UP = "bench-three-turns"
TURNS, CALLS_PER_TURN = 5, 2
"""bench-parallel.json: five tool turns of two parallel reads each, then the answer."""
TIMEOUT_S = 600.0
WATCHED_RUNS = 10
"""Runs of the batch watched with MONITOR for the table by step (`cost.step_costs`)."""


async def pipeline(
    deployment: Deployment, api: str, runs: int, scenario: str = SCENARIO
) -> dict[str, Any]:
    """Tool calls, seconds, CPU ms and Redis commands per call for ``runs`` concurrent runs of
    ``scenario`` (five turns of two calls), after one warm-up run."""
    assert deployment.redis is not None
    await deployment.run_batch(run_spec(api, WARM_UP), 1, TIMEOUT_S)
    before, commands_before, stand_in_before = (
        await cpu_seconds(deployment),
        await cost.commands_so_far(deployment.redis),
        stand_in_cpu_s(deployment),
    )
    records, started = await deployment.run_batch(run_spec(api, scenario), runs, TIMEOUT_S)
    after, commands_after, stand_in_after = (
        await cpu_seconds(deployment),
        await cost.commands_so_far(deployment.redis),
        stand_in_cpu_s(deployment),
    )
    finished = max(r.updated_ms for r in records) / 1000
    calls = runs * TURNS * CALLS_PER_TURN
    cpu = {name: (after[name] - before[name]) * 1000 / calls for name in before if name in after}
    commands = cost.per_call(commands_before.calls, commands_after.calls, calls)
    command_usec = cost.per_call(commands_before.usec, commands_after.usec, calls)
    workers = sum(ms for name, ms in cpu.items() if name not in NOT_WORKERS)
    stand_in = (stand_in_after - stand_in_before) * 1000 / calls
    return {
        "calls": calls,
        "seconds": finished - started,
        "calls_per_s": _rate(calls, finished - started),
        "cpu_ms_per_call": sum(cpu.values()),
        "cpu_ms_per_call_by_process": cpu,
        "workers_cpu_ms_per_call": workers,
        "stand_in_cpu_ms_per_call": stand_in,
        "runtime_cpu_ms_per_call": workers - stand_in,
        "redis_cpu_us_per_call": cpu.get("redis", 0.0) * 1000,
        "redis_commands_per_call": sum(commands.values()),
        "redis_commands_per_call_by_command": commands,
        "redis_command_us_per_call_by_command": command_usec,
    }


async def measure(
    deployment: Deployment, api: str, runs: int, floor: FloorRelay, progress: Progress
) -> dict[str, Any]:
    """Floor, pipeline, floor: the best floor rate counts (the floor is a bound)."""
    floor_rates = [_rate(*await floor.throughput(runs, TURNS, CALLS_PER_TURN))]
    progress(f"throughput: {runs} runs x {TURNS} turns x {CALLS_PER_TURN} calls")
    measured = await pipeline(deployment, api, runs)
    floor_rates.append(_rate(*await floor.throughput(runs, TURNS, CALLS_PER_TURN)))
    watched = min(WATCHED_RUNS, runs)
    progress(f"throughput: Redis commands by step ({watched} runs under MONITOR)")
    by_step = await cost.step_costs(
        deployment.system.settings.redis_url,
        api,
        SCENARIO,
        WARM_UP,
        watched,
        TURNS * CALLS_PER_TURN,
        progress,
    )
    return {**measured, "floor_calls_per_s": max(floor_rates), "redis_by_step": by_step}


def _rate(calls: int, seconds: float) -> float:
    return calls / seconds if seconds > 0 else 0.0
