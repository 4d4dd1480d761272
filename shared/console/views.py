"""What each console page shows, gathered through the API's own route functions (the runs
list, a run's view and trace, the inbox) so the console reads nothing the API does not — and
the run's timeline shaped from them (pure)."""

from __future__ import annotations

from typing import Any

from callgate.api import events, inbox, runs
from callgate.api.callers import Caller
from callgate.api.context import ApiContext
from callgate.redact import redact
from callgate.states import RUN_TERMINAL, RunState

ENDED = frozenset(state.value for state in RUN_TERMINAL)
RESUMABLE = frozenset({RunState.PAUSED_INCOMPLETE.value, RunState.HANDED_OFF.value})
"""Whom the run page offers Cancel (a live run) and Resume (paused incomplete, handed off)."""

DECISION_PREFIXES = ("approval.", "call.resolved", "api.", "run.cancelled", "run.resumed")
RECONCILING = frozenset({"unknown", "reconciling", "unresolved"})
"""The trace events the run page lists apart: approvals, reconciliation, people's decisions
and the door's refusals."""


async def runs_list(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
    """The newest runs, as `GET /runs` answers them."""
    found = await runs.list_runs(
        ctx,
        caller,
        status=None,
        tool=None,
        user=None,
        since=None,
        until=None,
        cursor=None,
        limit=50,
    )
    return {"runs": found.runs}


async def run_page(ctx: ApiContext, caller: Caller, run_id: str) -> dict[str, Any]:
    """A run as `GET /runs/{id}` and `GET /runs/{id}/events` answer it, as a timeline."""
    view = await runs.view_run(ctx, caller, run_id)
    trace = await events.trace(ctx, run_id)
    return timeline(view, trace)


async def inbox_items(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
    """What waits for the caller, as `GET /inbox` answers it."""
    return await inbox.inbox(ctx, caller)


def timeline(view: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """The run, its calls by turn with their timings, and its events with the time since the
    first one.  Call arguments and results are redacted here as the trace's are."""
    start = trace[0]["t_ms"] if trace else 0
    spans: dict[str, list[int]] = {}
    for event in trace:
        data = event["data"] if isinstance(event["data"], dict) else {}
        event["offset_s"] = (event["t_ms"] - start) / 1000
        call_id = data.get("call_id")
        if isinstance(call_id, str):
            spans.setdefault(call_id, []).append(event["t_ms"])
    calls = []
    for call in view["calls"]:
        seen = spans.get(call["call_id"], [])
        calls.append(
            {
                **call,
                "arguments": redact(call["arguments"]),
                "result": redact(call["result"]),
                "took_s": (max(seen) - min(seen)) / 1000 if seen else None,
            }
        )
    turns: dict[int, list[dict[str, Any]]] = {}
    for call in calls:
        turns.setdefault(call["turn"], []).append(call)
    decisions = [
        e
        for e in trace
        if e["type"].startswith(DECISION_PREFIXES)
        or (e["type"] == "call.transition" and e["data"].get("to") in RECONCILING)
    ]
    status = view["status"]
    acts = ([] if status in ENDED else ["cancel"]) + (["resume"] if status in RESUMABLE else [])
    return {
        "run": view,
        "turns": sorted(turns.items()),
        "events": trace,
        "decisions": decisions,
        "acts": acts,
    }
