"""Replay recorded cases through a real deployment and check each (`callgate cases run`).

One `LocalSystem` serves every case: its own Redis, the scripted model server (which says each
recorded turn again, `callgate.standins.scripted.recorded`) and one process per worker kind,
whose only tool module is `callgate.ops.cases.replay_tools` over the deployment's own tools.
Each case is one run: submitted as recorded (on its own API, or ``--api``), its people's
decisions posted again as those people, and what it came to checked by the conformance checker
against what the recording shows.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.decisions.desk import DecisionKind
from callgate.envelopes import new_id
from callgate.errors import CallgateError
from callgate.ops.cases.casefile import Case
from callgate.ops.cases.expect import expectation, recording, scenario
from callgate.ops.cases.replay_tools import (
    LIVE_READS,
    REPLAY_DIR,
    REPLAY_TOOL_MODULES,
    executions_path,
    recording_path,
)
from callgate.ops.conformance.checker import Cell, Counted, check
from callgate.ops.conformance.drive import UNREACHABLE, approve, observed_calls, settle
from callgate.ops.conformance.observation import Observation
from callgate.ops.conformance.probes import Probes
from callgate.ops.control_cli import resolve
from callgate.ops.system import SystemSpec
from callgate.states import RUN_PAUSED, RunState

Progress = Callable[[str], None]
VERDICT_TIMEOUT_S = 30.0
STUB = Counted(
    executions="the replay's tools ran it",
    effects="writes: expected {0}, the recording stub received {1}",
)
"""A replay counts what its tools ran: reads answered, writes the stub took (none went out)."""


@dataclass(frozen=True)
class Replay:
    """How to replay: on which API (None: each case's own), reads live or recorded."""

    api: str | None = None
    live_reads: bool = False
    concurrency: int = 8
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Verdict:
    """One case's replay, checked."""

    case: Case
    run_id: str
    cell: Cell
    elapsed_s: float
    writes: int
    """Writes the recording stub received (none reached a real service)."""


def replay_spec(folder: Path, tool_modules: Sequence[str], replay: Replay) -> SystemSpec:
    """The replaying system: the real tools behind `replay_tools`, the scripted model only."""
    return SystemSpec(
        services=(),
        scripted_model=True,
        redis="private",
        tool_modules=("callgate.ops.cases.replay_tools",),
        scenarios=(folder / "scenarios",),
        env={
            REPLAY_DIR: str(folder),
            REPLAY_TOOL_MODULES: ",".join(tool_modules),
            LIVE_READS: "1" if replay.live_reads else "0",
        },
    )


async def replay_cases(
    client: CallgateClient,
    model_url: str,
    folder: Path,
    cases: Sequence[Case],
    replay: Replay,
    progress: Progress,
) -> list[Verdict]:
    """Every case replayed (``replay.concurrency`` at a time), in the order given."""
    gate = asyncio.Semaphore(replay.concurrency)
    done: list[Verdict | None] = [None] * len(cases)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        probes = Probes(http, {"model": model_url})

        async def one(n: int, case: Case) -> None:
            async with gate:
                verdict = await replay_case(client, probes, folder, case, replay)
            done[n] = verdict
            mark = "✓" if verdict.cell.passed else "✗"
            count = sum(v is not None for v in done)
            progress(f"[{count}/{len(cases)}] {mark} {case.name} in {verdict.elapsed_s:.1f}s")

        await asyncio.gather(*(one(n, c) for n, c in enumerate(cases)))
    return [v for v in done if v is not None]


async def replay_case(
    client: CallgateClient, probes: Probes, folder: Path, case: Case, replay: Replay
) -> Verdict:
    """Replay ``case`` as a fresh run and check it (never raises for the case itself)."""
    run_id = f"replay-{new_id()[:12]}"
    api = replay.api or case.api
    started = time.monotonic()
    _write(recording_path(folder, run_id), recording(case))
    _write(folder / "scenarios" / f"{run_id}.json", scenario(case))
    states: list[str] = []
    error = None
    try:
        async with asyncio.timeout(replay.timeout_s):
            await client.submit(_spec(case, api, run_id))
            await _drive(client, case, run_id, states)
    except TimeoutError:
        last = states[-1] if states else "none settled"
        error = f"gave up after {replay.timeout_s:g}s (last state: {last})"
    except UNREACHABLE as exc:
        error = f"{type(exc).__name__}: {exc}"
    seen = await _observe(client, probes, folder, run_id, states, error)
    cell = check(expectation(case, run_id), api, seen, STUB)
    return Verdict(case, run_id, cell, time.monotonic() - started, seen.effects)


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(data))


def _spec(case: Case, api: str, run_id: str) -> dict[str, Any]:
    """The run as recorded, its model the scenario that says the recorded turns."""
    spec = {"run_id": run_id, "api": api, "model": run_id, **case.run.model_dump(mode="json")}
    return {k: v for k, v in spec.items() if v is not None}


async def _drive(client: CallgateClient, case: Case, run_id: str, states: list[str]) -> None:
    """Settle, then take each pause's way out as the case's people took it, to the end."""
    status = await settle(client, run_id, leaving=None)
    states.append(status)
    while status in RUN_PAUSED and len(states) < len(case.expected.states) + 2:
        if status == RunState.PAUSED_APPROVAL:
            await approve(client, run_id, choose=_chooser(case))
        elif status == RunState.PAUSED_UNKNOWN_OUTCOME:
            await _resolve(client, case, run_id)
        else:
            return
        status = await settle(client, run_id, leaving=status)
        states.append(status)


def _chooser(case: Case) -> Callable[[str], tuple[DecisionKind, str]]:
    decided = {a.call_id: a for a in case.people if a.act in ("approve", "deny")}

    def choose(call_id: str) -> tuple[DecisionKind, str]:
        act = decided.get(call_id)
        if act is None:
            raise CallgateError(f"call {call_id} waits for approval; the case recorded none")
        return ("approve" if act.act == "approve" else "deny"), act.by

    return choose


async def _resolve(client: CallgateClient, case: Case, run_id: str) -> None:
    """Resolve each unresolved call as its recorded person did (applied: the recorded result)."""
    view = await client.view(run_id)
    acts = {a.call_id: a for a in case.people if a.act == "resolve"}
    recorded = {c.call_id: c for c in case.calls}
    for call in (c for c in view["calls"] if c["state"] == "unresolved"):
        act = acts.get(call["call_id"])
        if act is None or act.outcome is None:
            raise CallgateError(f"call {call['call_id']} is unresolved; the case recorded no one")
        result = recorded[call["call_id"]].result if act.outcome == "applied" else None
        payload = (result or {}).get("payload") if result else None
        code, said = await resolve(
            client,
            run_id,
            call["call_id"],
            act.outcome,
            signer_of(client.settings, act.by),
            result=payload,
            reason="replay",
            timeout_s=VERDICT_TIMEOUT_S,
        )
        if code != 0:
            raise CallgateError(f"{act.by}'s resolution was not applied ({said})")


async def _observe(
    client: CallgateClient,
    probes: Probes,
    folder: Path,
    run_id: str,
    states: list[str],
    error: str | None,
) -> Observation:
    try:
        view = await client.view(run_id)
        events = await client.events(run_id)
        bodies = await probes.model_requests(run_id)
    except UNREACHABLE as exc:
        return Observation(run_id, tuple(states), error=f"{error or ''} {exc}".strip())
    executions, writes = executed(folder, run_id)
    return Observation(
        run_id=run_id,
        states=tuple(states),
        turns=int(view["turns"]),
        reason=view["reason"],
        executions=executions,
        effects=writes,
        calls=observed_calls(view["calls"], events),
        last_request=bodies[-1] if bodies else None,
        model_requests=len(bodies),
        error=error,
    )


def executed(folder: Path, run_id: str) -> tuple[dict[str, int], int]:
    """(executions per tool, writes) the replay's tools counted for ``run_id``."""
    path = executions_path(folder, run_id)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
    return dict(Counter(str(x["tool"]) for x in lines)), sum(x["effect"] != "read" for x in lines)
