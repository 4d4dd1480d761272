"""Scenario 1: the tool round trip, model to model, beside the 4-hop floor.

A round trip runs from the moment the model answers with a tool call to the moment the next
model request, carrying the call's result, reaches the model: model_turn records the response
and sends it to the validator, the validator decides, an executor runs the call (a tool that
answers at once), model_turn appends the result and requests the next turn, and reads that
request back — four stream hops, each with its durable ledger step.  Both ends are measured
by the model itself: the scripted model server (the SDK path) or `callgate.ops.bench.provider`'s
`ModelClock` (in process).
"""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp

from callgate.ops.bench.floor import FloorRelay
from callgate.ops.bench.harness import Deployment, run_spec
from callgate.ops.bench.provider import MODEL_LOG
from callgate.ops.stack import Progress

SCENARIOS = {"bench-latency": 50, "bench-three-turns": 2}
"""Scenario → its tool turns, i.e. round trips (shared/standins/scenarios/*.json); the second is
the smoke run's."""
WARM_UP = "bench-three-turns"
REPETITIONS = 3
"""Runs of the scenario with the in-process provider, each after its own floor run."""
TIMEOUT_S = 120.0


async def _warm_up(deployment: Deployment, api: str) -> None:
    """One run that warms imports, connections and caches before a measured one."""
    await deployment.run_batch(run_spec(api, WARM_UP), 1, TIMEOUT_S)


async def in_process_ms(
    deployment: Deployment, api: str, scenario: str
) -> tuple[list[float], list[tuple[str, str, str]]]:
    """Round trips of one run with the in-process provider, read from its `ModelClock` log,
    and the run's events as (stream id, type, to-state) for `report.step_breakdown`."""
    assert deployment.redis is not None and deployment.client is not None
    log = deployment.keys.bench(MODEL_LOG)
    last = await deployment.redis.xrevrange(log, count=1)
    after = last[0][0].decode() if last else "0-0"
    [run], _ = await deployment.run_batch(run_spec(api, scenario), 1, TIMEOUT_S)
    entries = await deployment.redis.xrange(log, min=f"({after}")
    events = await deployment.client.events(run.run_id)
    round_trips = [
        (int(fields[b"arrived_ns"]) - int(fields[b"answered_ns"])) / 1e6 for _, fields in entries
    ]
    return round_trips, [(e.id, e.type, str(e.data.get("to", ""))) for e in events]


async def sdk_ms(deployment: Deployment, api: str, scenario: str) -> list[float]:
    """Round trips through the official SDK, from the scripted model server's request log."""
    await _warm_up(deployment, api)
    await deployment.run_batch(run_spec(api, scenario), 1, TIMEOUT_S)
    url = deployment.system.urls["model"]
    async with aiohttp.ClientSession() as http, http.get(f"{url}/_log") as reply:
        log: list[dict[str, Any]] = await reply.json()
    requests = sorted(
        (e for e in log if e.get("scenario") == scenario), key=lambda e: e["received_ns"]
    )
    return [
        (later["received_ns"] - earlier["answered_ns"]) / 1e6
        for earlier, later in itertools.pairwise(requests)
    ]


async def measure(
    redis_url: str, api: str, scenario: str, floor: FloorRelay, progress: Progress
) -> dict[str, Any]:
    """Floor and in-process runs alternating (``REPETITIONS`` each, a last floor after), then
    the SDK run and a floor: the floors bracket the pipeline runs in time, so a machine
    whose speed drifts moves both sides of the ratio alike."""
    rounds = SCENARIOS[scenario]
    floor_ms: list[float] = []
    in_process: list[float] = []
    events: list[tuple[str, str, str]] = []
    progress(f"latency: in-process provider, {REPETITIONS} x {rounds} round trips")
    async with Deployment(redis_url, model="in_process_timed", progress=progress) as d:
        await _warm_up(d, api)
        for _ in range(REPETITIONS):
            floor_ms += await floor.latency_ms(rounds)
            trips, run_events = await in_process_ms(d, api, scenario)
            in_process += trips
            events += run_events
    floor_ms += await floor.latency_ms(rounds)
    progress(f"latency: official SDK to the scripted model server, {rounds} round trips")
    async with Deployment(redis_url, model="sdk", progress=progress) as d:
        sdk = await sdk_ms(d, api, scenario)
    floor_ms += await floor.latency_ms(rounds)
    return {"floor_ms": floor_ms, "in_process_ms": in_process, "sdk_ms": sdk, "events": events}
