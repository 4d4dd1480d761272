"""Scenario ``cases``: `callgate cases run` over many exported cases, which a user waits for
before an upgrade (README: "Before you upgrade").

One workshop run (a read and a write approved by carol in one turn, then an answer) is recorded
on a private deployment and exported; ``count`` copies of its case are then replayed exactly as
`callgate cases run DIR` replays them, timed from the replaying deployment's start to the last
verdict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from callgate.client import CallgateClient
from callgate.ops.cases.casefile import Case
from callgate.ops.cases.cli import replay_folder
from callgate.ops.cases.export import export_case
from callgate.ops.cases.replay import Replay
from callgate.ops.conformance.drive import approve
from callgate.ops.stack import Progress
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.tools.registry import load_registry

NAME = "cases"
WORKSHOP = "callgate.standins.demo.workshop"
RECORDED_TIMEOUT_S = 60.0


async def measure(api: str, count: int, progress: Progress) -> dict[str, Any]:
    """Seconds for `callgate cases run` over ``count`` recorded cases, and how many differed."""
    progress(f"cases: recording one workshop run on {api}")
    case = await _recorded(api)
    cases = [case.model_copy(update={"name": f"{case.name}-{n}"}) for n in range(count)]
    progress(f"cases: replaying {count} cases")
    started = time.monotonic()
    verdicts = await asyncio.to_thread(replay_folder, cases, (WORKSHOP,), Replay())
    seconds = time.monotonic() - started
    return {
        "cases": count,
        "seconds": seconds,
        "cases_per_s": count / seconds,
        "differ": sum(not v.cell.passed for v in verdicts),
    }


async def _recorded(api: str) -> Case:
    spec = SystemSpec(services=("booking",), scripted_model=True, redis="private")
    system = LocalSystem(dataclasses.replace(spec, tool_modules=(WORKSHOP,)))
    await asyncio.to_thread(system.start)
    try:
        async with CallgateClient(system.settings) as client:
            run_id = await client.submit(
                {
                    "api": api,
                    "model": "workshop-mixed",
                    "input": "Seats in ws-101? Book me in.",
                    "identity": {"user": "alice"},
                    "allowed_tools": ["check_seats", "reserve_seat"],
                }
            )
            status = await client.wait(run_id, RECORDED_TIMEOUT_S)
            if status["status"] == "paused_approval":
                await approve(client, run_id)
                await client.wait(run_id, RECORDED_TIMEOUT_S)
            return await export_case(client, run_id, load_registry([WORKSHOP]), "bench")
    finally:
        await asyncio.to_thread(system.stop)
