"""Drive one cell through a running system and observe it: submit, wait, approve, act, crash,
look.

The runner acts only as a user or an operator would: it submits a run, waits for it to
settle, posts an approval decision as the approver, posts the case's `Then` (a resolution or a
cancel) as the person it names, and SIGKILLs a worker process.  What it then reads becomes an
`Observation` for the pure checker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from redis.exceptions import RedisError

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk, DecisionKind
from callgate.errors import CallgateError, NotFoundError
from callgate.ops.conformance.catalogue import APPROVER, PAUSE, WRITE_IN_FLIGHT, Case, Then
from callgate.ops.conformance.observation import Observation, ObservedCall
from callgate.ops.conformance.probes import ProbeError, Probes
from callgate.ops.control_cli import control, resolve
from callgate.ops.system import LocalSystem
from callgate.records import Event
from callgate.states import CALL_TERMINAL
from callgate.tools.registry import load_registry

POLL_S = 0.05
UNREACHABLE = (CallgateError, ProbeError, aiohttp.ClientError, RedisError, OSError)
"""What a cell ends with, as its error, rather than ending the whole matrix."""
RESTART_TIMEOUT_S = 30.0
VERDICT_TIMEOUT_S = 30.0
MAX_TURNS = 4
CALLS_SETTLE_S = 30.0
"""How long a cancelled run's calls in flight may take to reach their true outcome."""
LATE_TURN_S = 1.0
"""After a cancel settles, how long a (wrong) next model turn is given to show up."""


@dataclass
class Context:
    """What every cell shares: the system, one client, one HTTP session's probes."""

    system: LocalSystem
    client: CallgateClient
    probes: Probes


@dataclass
class Trace:
    """What the driver saw while driving; kept even when it could not finish."""

    states: list[str] = field(default_factory=list)
    at_pause: dict[str, int] | None = None
    crash: str | None = None
    acted: str | None = None
    asked_at_action: int | None = None
    """Requests the model had received for the run once the person's action took effect."""
    error: str | None = None


def run_spec(case: Case, api: str, run_id: str) -> dict[str, Any]:
    """The run a cell submits; its id in the input lets the model server's log be filtered."""
    return {
        "run_id": run_id,
        "api": api,
        "model": case.scenario,
        "input": f"{case.input} [{run_id}]",
        "identity": dict(case.identity),
        "allowed_tools": list(load_registry([case.tools]).names()),
        "max_turns": MAX_TURNS,
    }


async def run_cell(
    ctx: Context, case: Case, api: str, run_id: str, timeout_s: float
) -> Observation:
    """Drive ``case`` on ``api`` as run ``run_id`` and observe it (never raises for the cell)."""
    trace = Trace()
    try:
        async with asyncio.timeout(timeout_s):
            await ctx.probes.arm(run_id, case)
            await ctx.client.submit(run_spec(case, api, run_id))
            await _drive(ctx, case, run_id, trace)
    except TimeoutError:
        now = trace.states[-1] if trace.states else "not settled"
        trace.error = f"gave up after {timeout_s:g}s (last settled state: {now})"
    except UNREACHABLE as exc:
        trace.error = f"{type(exc).__name__}: {exc}"
    try:
        return await observe(ctx, run_id, trace)
    except UNREACHABLE as exc:
        error = f"{trace.error or 'driven'}; could not observe: {type(exc).__name__}: {exc}"
        return Observation(run_id, tuple(trace.states), error=error)


async def _drive(ctx: Context, case: Case, run_id: str, trace: Trace) -> None:
    status = await settle(ctx.client, run_id, leaving=None)
    trace.states.append(status)
    while len(trace.states) < len(case.states) and (status == PAUSE or _due(case.then, status)):
        if status == PAUSE:
            trace.at_pause = await ctx.probes.executions(run_id)
            await approve(ctx.client, run_id)
            if case.crash is not None:
                trace.crash = await kill_during_write(ctx, case.crash, run_id)
        if case.then is not None and _due(case.then, status):
            await take(ctx, case.then, run_id, trace)
        status = await settle(ctx.client, run_id, leaving=status)
        trace.states.append(status)
    if case.then is not None and case.then.act == "cancel":
        await calls_settled(ctx.client, run_id)
        await asyncio.sleep(LATE_TURN_S)


def _due(then: Then | None, status: str) -> bool:
    """Whether ``then`` is taken where the run settled (in flight: right after approving)."""
    if then is None:
        return False
    return then.when == status or (then.when == WRITE_IN_FLIGHT and status == PAUSE)


async def take(ctx: Context, then: Then, run_id: str, trace: Trace) -> None:
    """Post ``then`` as its person, as `callgate resolve` / `cancel` do; a refusal is an error."""
    signer = signer_of(ctx.client.settings, then.by)
    if then.act == "cancel":
        if then.when == WRITE_IN_FLIGHT:
            await until_write_in_flight(ctx, run_id)
        code, said = await control(
            ctx.client, run_id, "cancel", signer, VERDICT_TIMEOUT_S, reason="conformance"
        )
    else:
        view = await ctx.client.view(run_id)
        waiting = [c["call_id"] for c in view["calls"] if c["state"] == "unresolved"]
        if len(waiting) != 1:
            raise CallgateError(f"{then.by} has {len(waiting)} unresolved call(s) to resolve")
        result = None if then.result is None else dict(then.result)
        code, said = await resolve(
            ctx.client,
            run_id,
            waiting[0],
            then.outcome,
            signer,
            result=result,
            reason="conformance",
            timeout_s=VERDICT_TIMEOUT_S,
        )
    if code != 0:
        raise CallgateError(f"{then.by}'s {then.act} was not applied ({said})")
    trace.acted = f"{then.by}: {said}"
    trace.asked_at_action = len(await ctx.probes.model_requests(run_id))


async def calls_settled(client: CallgateClient, run_id: str) -> None:
    """Wait (bounded) until every call of the run is final: a write in flight when the run was
    cancelled still ends as it truly did.  The checker says so if one never does."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CALLS_SETTLE_S):
            while True:
                calls = (await client.view(run_id))["calls"]
                if all(c["state"] in CALL_TERMINAL for c in calls):
                    return
                await asyncio.sleep(POLL_S)


async def settle(client: CallgateClient, run_id: str, leaving: str | None) -> str:
    """The next state the run settles in (paused or ended) other than ``leaving``."""
    while True:
        # No deadline of its own: the cell's timeout bounds it.
        status = str((await client.wait(run_id, timeout_s=3600))["status"])
        if status != leaving:
            return status
        await asyncio.sleep(POLL_S)


Choice = Callable[[str], tuple[DecisionKind, str]]
"""For a call id waiting for approval: what to decide, and who decides it."""


async def approve(
    client: CallgateClient, run_id: str, approver: str = APPROVER, choose: Choice | None = None
) -> int:
    """Decide every call waiting for approval — approve as ``approver``, or as ``choose`` says —
    as `callgate approve` does; returns how many.  Waits for the validator's verdict: a refused
    decision is an error."""
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    view = await client.view(run_id)
    waiting = [c["call_id"] for c in view["calls"] if c["state"] == "needs_approval"]
    for call in await client.ledger.get_calls(run_id, waiting):
        record = None
        if call.approval_id is not None:
            record = await client.ledger.get_approval(run_id, call.approval_id)
        if record is None:
            raise CallgateError(f"call {call.call_id} waits for approval but has no approval")
        kind, person = choose(call.call_id) if choose else ("approve", approver)
        after = await desk.last_event_id(run_id)
        signer = signer_of(client.settings, person)
        message = await desk.post(record, kind, signer, reason="conformance")
        verdict = await desk.wait_outcome(message, after, timeout_s=VERDICT_TIMEOUT_S)
        if verdict is None or not verdict.applied:
            said = "no verdict" if verdict is None else f"{verdict.event}: {verdict.reason}"
            raise CallgateError(f"{person}'s {kind} of {call.call_id} was not applied ({said})")
    return len(waiting)


async def kill_during_write(ctx: Context, kind: str, run_id: str) -> str:
    """SIGKILL the ``kind`` worker once the run's write is in flight; wait for its restart."""
    await until_write_in_flight(ctx, run_id)
    supervisor = ctx.system.supervisor
    name = ctx.system.workers[kind][0]
    pid = supervisor.pids().get(name)
    if pid is None:
        raise CallgateError(f"{name} is not running, so it cannot be killed")
    supervisor.kill(name)
    try:
        new_pid = await asyncio.to_thread(supervisor.wait_restarted, name, pid, RESTART_TIMEOUT_S)
    except TimeoutError as exc:
        raise CallgateError(f"{name} was killed but not restarted: {exc}") from exc
    return f"SIGKILL {name} pid {pid} with the write in flight; restarted as pid {new_pid}"


async def until_write_in_flight(ctx: Context, run_id: str) -> None:
    """Until the call is ``executing`` and the booking service has received the request; an
    error if the write finished first (the case's delay is too short to act in)."""
    while True:
        calls = (await ctx.client.view(run_id))["calls"]
        if calls and all(c["state"] in CALL_TERMINAL for c in calls):
            raise CallgateError("the write finished before it was seen in flight")
        executing = any(c["state"] == "executing" for c in calls)
        if executing and await ctx.probes.reserve_requests(run_id) > 0:
            return
        await asyncio.sleep(POLL_S)


async def observe(ctx: Context, run_id: str, trace: Trace) -> Observation:
    """Everything the checker needs about the run, from the ledger, services and model log."""
    try:
        view: dict[str, Any] = await ctx.client.view(run_id)
    except NotFoundError:
        view = {"calls": [], "turns": 0, "reason": None}
    events = await ctx.client.events(run_id)
    executions, effects = await ctx.probes.counts(run_id)
    bodies = await ctx.probes.model_requests(run_id)
    calls = observed_calls(view["calls"], events)
    return Observation(
        run_id=run_id,
        states=tuple(trace.states),
        turns=int(view["turns"]),
        reason=view["reason"],
        executions=executions,
        executions_at_pause=trace.at_pause,
        effects=effects,
        calls=calls,
        last_request=bodies[-1] if bodies else None,
        model_requests=len(bodies),
        finish_order=finish_order(view["calls"], events),
        crash=trace.crash,
        acted=trace.acted,
        model_requests_at_action=trace.asked_at_action,
        error=trace.error,
    )


def observed_calls(calls: list[dict[str, Any]], events: list[Event]) -> tuple[ObservedCall, ...]:
    """The run's calls with the path and reasons their event log shows."""
    paths: dict[str, list[str]] = {}
    reasons: dict[str, list[str]] = {}
    for event in events:
        call_id = str(event.data.get("call_id", ""))
        if event.type == "call.created":
            paths.setdefault(call_id, []).append(str(event.data.get("state")))
        elif event.type == "call.transition":
            paths.setdefault(call_id, []).append(str(event.data.get("to")))
            if event.data.get("reason"):
                reasons.setdefault(call_id, []).append(str(event.data["reason"]))
    return tuple(
        ObservedCall(
            tool=c["tool"],
            provider_call_id=c["provider_call_id"],
            turn=int(c["turn"]),
            state=c["state"],
            result=c["result"],
            path=tuple(paths.get(c["call_id"], [])),
            reasons=tuple(reasons.get(c["call_id"], [])),
            decision=c.get("decision"),
        )
        for c in calls
    )


def finish_order(calls: list[dict[str, Any]], events: list[Event]) -> tuple[str, ...]:
    """Tools in the order their calls reached a final state, by the event log."""
    tools = {c["call_id"]: c["tool"] for c in calls}
    return tuple(
        tools.get(str(e.data.get("call_id")), "?")
        for e in events
        if e.type == "call.transition" and e.data.get("to") in CALL_TERMINAL
    )
