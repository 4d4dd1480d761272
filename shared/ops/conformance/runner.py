"""Run the matrix: one real deployment, every cell driven through it, each cell checked.

One `LocalSystem` serves every cell: Redis (``REDIS_URL`` if it answers, else embedded; a
fresh key prefix either way), the demo travel and booking services, the scripted model
server — always, so conformance never reaches a real provider — and one process per worker
kind.  Cells run concurrently (bounded), which the demo services allow because they count
and inject faults per run.  The crash cells SIGKILL a worker every cell shares, so they run
last, one at a time, with nothing else in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from callgate.client import CallgateClient
from callgate.envelopes import new_id
from callgate.ops.conformance.catalogue import APIS, Case
from callgate.ops.conformance.checker import Cell, check
from callgate.ops.conformance.drive import Context, run_cell
from callgate.ops.conformance.observation import Observation
from callgate.ops.conformance.probes import Probes
from callgate.ops.system import LocalSystem, SystemSpec

Progress = Callable[[str], None]


def _silent(message: str) -> None:
    """Progress nobody asked to see."""


@dataclass(frozen=True)
class Plan:
    """Which cells to run, and how."""

    cases: tuple[Case, ...]
    apis: tuple[str, ...] = APIS
    concurrency: int = 8
    cell_timeout_s: float = 90.0

    def cells(self) -> list[tuple[Case, str]]:
        return [(case, api) for case in self.cases for api in self.apis]


@dataclass(frozen=True)
class Outcome:
    """One cell's verdict with the observation behind it (tests break the latter on purpose)."""

    case: Case
    observation: Observation
    cell: Cell
    elapsed_s: float = 0.0


def system_spec(redis_url: str | None = None) -> SystemSpec:
    return SystemSpec(
        services=("travel", "booking"),
        scripted_model=True,
        redis_url=redis_url,
        # Always fresh (never CALLGATE_KEY_PREFIX): another deployment's workers on the same
        # Redis would otherwise take our messages, and we theirs.
        key_prefix=f"conf{new_id()[:8]}",
        env={
            # A killed executor's message is reclaimed after 1 s; reconciliation starts at once.
            "CALLGATE_CLAIM_IDLE_MS": "1000",
            "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6, 1.2, 2.4]",
        },
        grace_s=3.0,
    )


def start_system(redis_url: str | None = None, progress: Progress = _silent) -> LocalSystem:
    """A started system for the matrix; the caller stops it."""
    return LocalSystem(system_spec(redis_url), progress=progress).start()


async def run_plan(system: LocalSystem, plan: Plan, progress: Progress = _silent) -> list[Outcome]:
    """Every cell of ``plan`` against ``system``, in catalogue × protocol order."""
    cells = plan.cells()
    done: dict[tuple[str, str], Outcome] = {}
    gate = asyncio.Semaphore(plan.concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        client = CallgateClient(system.settings)
        ctx = Context(system, client, Probes(http, system.urls))
        try:

            async def one(case: Case, api: str) -> None:
                async with gate:
                    outcome = await _run_one(ctx, case, api, plan.cell_timeout_s)
                done[(case.id, api)] = outcome
                progress(_line(outcome, len(done), len(cells)))

            await asyncio.gather(*(one(c, a) for c, a in cells if c.crash is None))
            for case, api in cells:
                if case.crash is not None:
                    await one(case, api)
        finally:
            await client.close()
    return [done[(case.id, api)] for case, api in cells]


async def _run_one(ctx: Context, case: Case, api: str, timeout_s: float) -> Outcome:
    run_id = f"conf-{case.id}-{api}-{new_id()[:8]}"
    started = time.monotonic()
    seen = await run_cell(ctx, case, api, run_id, timeout_s)
    return Outcome(case, seen, check(case, api, seen), time.monotonic() - started)


def _line(outcome: Outcome, n: int, total: int) -> str:
    cell = outcome.cell
    mark = "✓" if cell.passed else "✗"
    return (
        f"[{n}/{total}] {mark} {cell.case} × {cell.api} in {outcome.elapsed_s:.1f}s"
        f" (run {outcome.observation.run_id})"
    )


def run_matrix(
    plan: Plan, redis_url: str | None = None, progress: Progress = _silent
) -> list[Outcome]:
    """Start a system, run ``plan`` on it, stop it."""
    system = start_system(redis_url, progress)
    try:
        return asyncio.run(run_plan(system, plan, progress))
    finally:
        progress("stopping the system")
        system.stop()


def cells_of(outcomes: Sequence[Outcome]) -> list[Cell]:
    return [o.cell for o in outcomes]
