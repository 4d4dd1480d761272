"""`callgate chaos --crash-points`: SIGKILL every worker at every boundary, for every effect
kind, and check the same invariants after the supervisor has restarted each process.

One system with one replica of each worker and every boundary of `boundaries` armed, each
to fire once (``CALLGATE_CRASH_ONCE_FILE``).  For each effect kind in turn: re-arm (delete
the markers), then run one run per protocol whose tools all have that effect, one after
another.  Each boundary kills the first process that reaches it, so the three runs share the
crashes, and every crash must be recovered from for the runs to end.  A boundary's marker
file is the proof that it fired; the supervisor's restart count, that the process came back.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from callgate.ops.chaos.boundaries import BOUNDARIES, EFFECTS, boundary_names
from callgate.ops.chaos.invariants import check_all
from callgate.ops.chaos.report import EXAMPLES, invariant_lines, run_figures
from callgate.ops.chaos.session import Progress, Session, system_spec
from callgate.ops.chaos.workload import PlannedRun, walk_runs
from callgate.ops.system import LocalSystem, SystemSpec

SETTLE_TIMEOUT_S = 180.0
RESTART_TIMEOUT_S = 30.0
WALK_ENV = {
    "CALLGATE_CLAIM_IDLE_MS": "500",
    "CALLGATE_HEARTBEAT_MS": "150",
    "CALLGATE_MAX_DELIVERIES": "10",
}
"""Quick reclaims after each crash.  One message may meet several armed boundaries, and each
XAUTOCLAIM counts as a delivery (also a live consumer's own, when a loaded machine delays its
heartbeat), so the poison-message limit is raised: the walk tests recovery, not poison."""


def walk_spec(marker: Path, redis_url: str | None = None) -> SystemSpec:
    env = {
        **WALK_ENV,
        "CALLGATE_CRASH_AT": ",".join(boundary_names()),
        "CALLGATE_CRASH_ONCE_FILE": str(marker),
    }
    return system_spec({}, env, redis_url)


async def _all_running(system: LocalSystem, timeout_s: float) -> None:
    """Until the supervisor has restarted the last process a boundary killed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while set(system.supervisor.pids()) != set(system.supervisor.children):
        if loop.time() > deadline:
            return  # the restart count then shows what is missing
        await asyncio.sleep(0.1)


def fired(marker: Path) -> set[str]:
    return {b.name for b in BOUNDARIES if Path(f"{marker}.{b.name}").exists()}


def rearm(marker: Path) -> None:
    for name in boundary_names():
        Path(f"{marker}.{name}").unlink(missing_ok=True)


async def _phase(session: Session, marker: Path, plans: list[PlannedRun]) -> set[str]:
    """Run one effect kind's runs, one after another, under every armed boundary; return the
    boundaries that fired.  One at a time, so a crash kills one run's work only and the
    next run reaches the boundaries still armed (run together, one crash would orphan every
    run's call at once and the later boundaries would be skipped)."""
    rearm(marker)
    for plan in plans:
        await session.submit(plan)
        await session.wait_settled([plan.run_id], SETTLE_TIMEOUT_S)
    return fired(marker)


async def walk_session(system: LocalSystem, marker: Path, progress: Progress) -> dict[str, Any]:
    phases = {effect: walk_runs(effect) for effect in EFFECTS}
    session = Session(system, [p for plans in phases.values() for p in plans], progress)
    table: dict[str, dict[str, str]] = {b.name: {} for b in BOUNDARIES}
    try:
        await session.wait_ready()
        approver = asyncio.create_task(session.approver.run())
        for effect, plans in phases.items():
            progress(f"crash walk: {effect}")
            hit = await _phase(session, marker, plans)
            for boundary in BOUNDARIES:
                expected = effect in boundary.effects
                state = "crashed" if boundary.name in hit else "missed" if expected else "-"
                table[boundary.name][effect] = state
        session.approver.stop()
        await approver
        facts = await session.facts()
        await _all_running(system, RESTART_TIMEOUT_S)
    finally:
        await session.close()
    violations = check_all(facts)
    missed = [f"{e}: {name}" for name, row in table.items() for e, s in row.items()
              if s == "missed"]  # fmt: skip
    crashes = sum(1 for row in table.values() for s in row.values() if s == "crashed")
    restarts = dict(system.supervisor.restarts)
    return {
        "boundaries": table,
        "crashes": crashes,
        "restarts": restarts,
        "missed": missed,
        "runs": run_figures(facts),
        **{name: len(found) for name, found in violations.items()},
        "violations": {name: found[:EXAMPLES] for name, found in violations.items() if found},
        "ok": not missed and not any(violations.values()) and sum(restarts.values()) >= crashes,
    }


def run_walk(progress: Progress, redis_url: str | None = None) -> dict[str, Any]:
    """Start a system with every boundary armed, walk it, stop it; the figures."""
    with tempfile.TemporaryDirectory(prefix="callgate-crash-") as tmp:
        marker = Path(tmp) / "crashed"
        system = LocalSystem(walk_spec(marker, redis_url), progress=progress)
        started = time.monotonic()
        try:
            system.start()
            fig = asyncio.run(walk_session(system, marker, progress))
        finally:
            system.stop()
    return {**fig, "elapsed_s": round(time.monotonic() - started, 1)}


def render_walk(fig: dict[str, Any]) -> str:
    """The boundary × effect table, the runs, the invariants."""
    lines = [f"{'boundary':<28}" + "".join(f"{e:<18}" for e in EFFECTS)]
    for boundary in BOUNDARIES:
        row = fig["boundaries"][boundary.name]
        lines.append(f"{boundary.name:<28}" + "".join(f"{row[e]:<18}" for e in EFFECTS))
    runs = fig["runs"]
    lines.append(
        f"crashes {fig['crashes']} · supervisor restarts {sum(fig['restarts'].values())}"
        f" · runs {runs['submitted']}: completed {runs['completed']}, paused "
        f"{sum(runs['paused'].values())}, failed {runs['failed']}, lost {runs['lost']}"
        f" · {fig.get('elapsed_s', '?')} s"
    )
    lines += invariant_lines(fig)
    lines.append(
        "result: "
        + (
            "every boundary crashed and recovered; every invariant holds"
            if fig["ok"]
            else f"FAILED (missed: {fig['missed']})"
        )
    )
    return "\n".join(lines)
