"""The invariants the explorer checks after every event, and at rest.

The session-level ones are chaos's own (`callgate.ops.chaos.invariants`), over the same
`Facts`, here gathered from the explorer's world: the ledger, the store (the system of record)
and what the model received.  After every event only those that must hold at every moment
apply (`ALWAYS`); at rest, all of them.  Beside them, step-level invariants:

* every state change is a transition of the run and call state machines (each run's and
  call's logged states, in order, and its record agrees with the last);
* a write is never sent while an earlier dispatch of it is unsettled: one request per
  operation id for a write (chaos's duplicate writes), and never two takes of one call open;
* an approval is consumed at most once, by its own call, for exactly the arguments it binds;
* a call first taken after its run's cancel never reaches the system of record;
* every result is stored under its own call id (the service names the call it answered).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from callgate.errors import TransitionError
from callgate.ops.chaos import invariants
from callgate.ops.chaos.facts import (
    Facts,
    SentReply,
    dead_letter_count,
    latest_conversations,
    run_facts,
)
from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.explore.store import Dispatch
from callgate.ops.explore.world import World
from callgate.records import OkResult
from callgate.states import CallState, RunState, check_call, check_run

Sent = Callable[[str], Sequence[SentReply]]
"""The replies sent to a run, with their verdicts."""
ALWAYS = (
    "duplicate_writes",
    "unrequested_effects",
    "calls_without_one_result",
    "mispaired_results",
    "cancelled_calls_executed",
)
"""Chaos invariants that hold at every moment, not only once runs have settled."""


async def gather(world: World, plans: Sequence[PlannedRun], sent: Sent) -> Facts:
    conversations = latest_conversations(world.model.received)
    runs = [
        await run_facts(world.ledger, plan, conversations.get(plan.run_id), sent(plan.run_id))
        for plan in plans
    ]
    return Facts(
        runs=tuple(runs),
        reserve_requests=dict(world.store.requests),
        reservations=dict(world.store.created),
        dead_letters=await dead_letter_count(world.redis, world.keys),
        model_requests=len(world.model.received),
        model_drops=0,
    )


def illegal_transitions(
    facts: Facts, logs: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]]
) -> list[str]:
    """Each run's and call's states as logged, in order, each a legal step from the last."""
    found: list[str] = []
    for r in facts.runs:
        last: dict[str, str] = {}
        for kind, data in logs.get(r.plan.run_id, ()):
            if kind == "run.created":
                last["run"] = str(data.get("status"))
            if kind not in ("run.transition", "call.transition"):
                continue
            who = str(data.get("call_id", "run"))
            start = RunState.QUEUED if who == "run" else CallState.REQUESTED
            before, after = last.get(who, str(start)), str(data.get("to"))
            try:
                (check_run if who == "run" else check_call)(before, after)
            except TransitionError:
                found.append(f"{r.plan.run_id}/{who}: {before} → {after}")
            last[who] = after
        if r.run is not None and last.get("run", "queued") != r.run.status:
            found.append(f"{r.plan.run_id}: record {r.run.status}, log {last.get('run')}")
        found += [
            f"{r.plan.run_id}/{c.call_id}: record {c.state}, log {last.get(c.call_id)}"
            for c in r.calls
            if last.get(c.call_id, "requested") != c.state
        ]
    return found


def approvals_misused(dispatches: Sequence[Dispatch]) -> list[str]:
    """Every request under an approval went out under that call's own, consumed approval, for
    the arguments it binds, and no approval sent two calls."""
    found: list[str] = []
    calls_of: dict[str, set[str]] = {}
    for d in dispatches:
        approval = d.seen.get("approval")
        if d.tool != "transfer":
            continue
        where = f"{d.run_id}/{d.call_id}"
        if approval is None:
            found.append(f"{where}: sent without an approval")
            continue
        calls_of.setdefault(approval["id"], set()).add(d.call_id)
        if approval["state"] != "consumed" or approval["call_id"] != d.call_id:
            found.append(
                f"{where}: sent under approval {approval['id']} "
                f"({approval['state']}, for {approval['call_id']})"
            )
        elif approval["args_hash"] != d.args_hash:
            found.append(f"{where}: sent with arguments its approval does not bind")
    found += [f"approval {a}: sent {len(c)} calls" for a, c in calls_of.items() if len(c) > 1]
    return found


def taken_after_cancel(dispatches: Sequence[Dispatch]) -> list[str]:
    """A request whose call was first taken (``→ executing``) after its run's cancel: a call
    in flight at the cancel settles with its true outcome (an orphan is re-taken for that),
    one not yet taken must never start."""
    found = []
    for d in dispatches:
        cancelled = False
        for kind, data in d.seen.get("events", ()):
            if kind == "run.transition" and data.get("to") == "cancelled":
                cancelled = True
            elif (
                kind == "call.transition"
                and data.get("call_id") == d.call_id
                and data.get("to") == "executing"
            ):
                if cancelled:
                    found.append(f"{d.run_id}/{d.call_id}: {d.tool} taken after the run's cancel")
                break
    return found


def results_under_other_ids(facts: Facts) -> list[str]:
    """A stored result whose payload the service made for another call."""
    return [
        f"{r.plan.run_id}/{c.call_id}: holds the result of {c.result.payload['call']}"
        for r in facts.runs
        for c in r.calls
        if isinstance(c.result, OkResult)
        and isinstance(c.result.payload, dict)
        and c.result.payload.get("call") not in (None, c.call_id)
    ]


def open_takes(
    facts: Facts, logs: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]]
) -> list[str]:
    """A write taken (``→ executing``) again while an earlier take of it is unsettled."""
    found = []
    writes = {
        (r.plan.run_id, c.call_id) for r in facts.runs for c in r.calls if c.effect == "write"
    }
    for run_id, events in logs.items():
        takes: Counter[str] = Counter()
        for kind, data in events:
            call_id = str(data.get("call_id"))
            if (
                kind == "call.transition"
                and (run_id, call_id) in writes
                and (data.get("to") == "executing")
            ):
                takes[call_id] += 1
        found += [f"{run_id}/{c}: taken {n} times" for c, n in takes.items() if n > 1]
    return found


async def logs_of(world: World, plans: Sequence[PlannedRun]) -> dict[str, list[Any]]:
    return {
        p.run_id: [(e.type, e.data) for e in await world.ledger.events(p.run_id)] for p in plans
    }


async def violations(
    world: World, plans: Sequence[PlannedRun], sent: Sent, *, at_rest: bool
) -> dict[str, list[str]]:
    """Every invariant that applies now → what breaks it (only the broken ones)."""
    facts = await gather(world, plans, sent)
    logs = await logs_of(world, plans)
    names = invariants.CHECKS if at_rest else ALWAYS
    dispatches = world.store.dispatches
    found = {name: invariants.CHECKS[name](facts) for name in names}
    found |= {
        "illegal_transitions": illegal_transitions(facts, logs),
        "open_takes": open_takes(facts, logs),
        "approvals_misused": approvals_misused(dispatches),
        "taken_after_cancel": taken_after_cancel(dispatches),
        "results_under_other_ids": results_under_other_ids(facts),
    }
    return {name: items for name, items in found.items() if items}
