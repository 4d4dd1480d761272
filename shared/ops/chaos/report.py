"""A session's figures: as data (``--json``) and as a short text for people (pure)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from callgate.ops.chaos.facts import Facts
from callgate.ops.chaos.invariants import CHECKS, check_all, reservations_per_approved_call, settled
from callgate.ops.chaos.people import PeopleStats
from callgate.ops.chaos.recovery import Kill
from callgate.states import RUN_PAUSED, RunState

EXAMPLES = 5
"""Violations listed per invariant (the count is always complete)."""


def run_figures(facts: Facts) -> dict[str, Any]:
    """Runs by how they ended; paused ones by reason, and the reasons of those that did not
    complete (the first 200 characters of each)."""
    ends: Counter[str] = Counter()
    paused: Counter[str] = Counter()
    why: dict[str, str] = {}
    for r in facts.runs:
        if r.run is None or not settled(r.run.status):
            ends["lost"] += 1
        elif r.run.status in RUN_PAUSED:
            reason = (r.run.reason or "").split(":")[0].split("(")[0].strip()
            paused[f"{r.run.status.value}: {reason}"] += 1
        else:
            ends[r.run.status.value] += 1
        if r.run is not None and r.run.status != RunState.COMPLETED:
            why[r.plan.run_id] = f"{r.run.status.value}: {r.run.reason or ''}"[:200]
    return {
        "submitted": len(facts.runs),
        "completed": ends["completed"],
        "paused": dict(sorted(paused.items())),
        "failed": ends["failed"],
        "handed_off": ends["handed_off"],
        "refused": ends["refused"],
        "cancelled": ends["cancelled"],
        "lost": ends["lost"],
        "not_completed": dict(list(why.items())[:EXAMPLES]),
    }


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "p50": round(statistics.median(values), 2) if values else None,
        "max": round(max(values), 2) if values else None,
    }


def recovery_figures(kills: Sequence[Kill]) -> dict[str, Any]:
    """p50/max of the recovery time over the kills that held work (see `recovery`), overall
    and per worker kind."""
    measured = [k for k in kills if k.held and k.recovery_s is not None]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({k.kind for k in measured}):
        times = [k.recovery_s for k in measured if k.kind == kind and k.recovery_s is not None]
        by_kind[kind] = {**_spread(times), "kills": len(times)}
    return {
        **_spread([k.recovery_s for k in measured if k.recovery_s is not None]),
        "kills_holding_work": sum(1 for k in kills if k.held),
        "unrecovered": sum(1 for k in kills if k.held and k.recovery_s is None),
        "by_kind": by_kind,
    }


def write_figures(facts: Facts) -> dict[str, Any]:
    reconciled = sum(
        1 for r in facts.runs for c in r.calls if (c.reason or "").startswith("reconciled:")
    )
    return {
        "reserve_requests": sum(facts.reserve_requests.values()),
        "reservations": sum(facts.reservations.values()),
        "reconciled": reconciled,
    }


def people_figures(facts: Facts, stats: PeopleStats) -> dict[str, Any]:
    """What people did, as the ledger recorded it: cancels applied (and the writes they found
    in flight), refused (the run had ended), or never posted; resolutions applied by outcome."""
    cancelled = [r for r in facts.runs if r.people.cancel_turn is not None]
    writes = {
        (r.plan.run_id, c.call_id)
        for r in facts.runs
        for c in r.calls
        if c.effect in ("write", "idempotent_write")
    }
    resolved: Counter[str] = Counter(
        outcome
        for r in facts.runs
        for outcomes in r.people.resolutions.values()
        for outcome in outcomes
    )
    return {
        "cancels_posted": stats.cancels_posted,
        "cancelled": len(cancelled),
        "writes_in_flight_at_cancel": sum(
            (r.plan.run_id, c) in writes for r in cancelled for c in r.people.in_flight_at_cancel
        ),
        "cancels_refused": sum(r.people.cancels_refused for r in facts.runs),
        "cancels_missed": stats.cancels_missed,
        "resolved": {k: resolved[k] for k in ("applied", "not_applied", "recheck")},
        "replies": reply_figures(facts),
    }


def reply_figures(facts: Facts) -> dict[str, int]:
    """Replies sent (by policy), and their verdicts: admitted, refused, none (still waiting)."""
    sent = [s for r in facts.runs for s in r.sent]
    counts: Counter[str] = Counter(s.verdict for s in sent)
    return {
        "sent": len(sent),
        "enqueued": sum(s.policy == "enqueue" for s in sent),
        **{k: counts[k] for k in ("admitted", "refused", "none")},
    }


def figures(facts: Facts, kills: Sequence[Kill], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a session shows; ``ok`` is True when every invariant has its required value."""
    violations = check_all(facts)
    recovery = recovery_figures(kills)
    kinds: Counter[str] = Counter(k.kind for k in kills)
    result: dict[str, Any] = {
        **extra,
        "runs": run_figures(facts),
        "kills": dict(sorted(kinds.items())),
        "model_requests": facts.model_requests,
        "model_drops": facts.model_drops,
        "writes": write_figures(facts),
        "reservations_per_approved_call": reservations_per_approved_call(facts),
        "dead_letters": facts.dead_letters,
        **{name: len(found) for name, found in violations.items()},
        "recovery_s": recovery,
        "kill_log": [
            {"kind": k.kind, "name": k.name, "held": len(k.held), "recovery_s": k.recovery_s}
            for k in kills
        ],
        "violations": {name: found[:EXAMPLES] for name, found in violations.items() if found},
    }
    result["ok"] = not any(violations.values()) and recovery["unrecovered"] == 0
    return result


def _pairs(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items()) or "none"


def invariant_lines(fig: Mapping[str, Any]) -> list[str]:
    """One line per invariant: its count, and examples when it is violated."""
    lines = []
    for name in CHECKS:
        examples = "; ".join(fig["violations"].get(name, []))
        mark = "ok" if fig[name] == 0 else f"VIOLATED: {examples}"
        lines.append(f"invariant   {name} = {fig[name]} ({mark})")
    return lines


def _people_lines(people: Mapping[str, Any]) -> list[str]:
    return [
        f"people      cancels posted {people['cancels_posted']} · applied {people['cancelled']}"
        f" (writes in flight {people['writes_in_flight_at_cancel']}) · refused, run ended "
        f"{people['cancels_refused']} · resolved {_pairs(people['resolved'])}",
        *([f"            replies {_replies(people['replies'])}"] if "replies" in people else []),
    ]


def _replies(replies: Mapping[str, int]) -> str:
    return (
        f"{replies['sent']} (enqueued {replies['enqueued']}) · admitted "
        f"{replies['admitted']} · refused {replies['refused']} · no verdict {replies['none']}"
    )


def render(fig: Mapping[str, Any]) -> str:
    """The figures as a few lines of text."""
    runs, rec, writes = fig["runs"], fig["recovery_s"], fig["writes"]
    paused = sum(runs["paused"].values())
    lines = [
        f"runs        submitted {runs['submitted']} · completed {runs['completed']} · paused "
        f"{paused} ({_pairs(runs['paused'])}) · failed {runs['failed']} · handed off "
        f"{runs['handed_off']} · cancelled {runs.get('cancelled', 0)} · lost {runs['lost']}"
        f" · dead letters {fig['dead_letters']}",
        f"kills       {sum(fig['kills'].values())} ({_pairs(fig['kills'])})"
        f" · {_redis_fault(fig)}"
        f" · model streams dropped {fig['model_drops']} of {fig['model_requests']}",
        f"writes      reserve requests {writes['reserve_requests']} · reservations "
        f"{writes['reservations']} · reconciled after a lost answer {writes['reconciled']}"
        f" · reservations per approved call: {_pairs(fig['reservations_per_approved_call'])}",
        *([f"approvals   {_pairs(fig['approvals'])}"] if "approvals" in fig else []),
        *(_people_lines(fig["people"]) if "people" in fig else []),
        f"recovery    p50 {rec['p50']} s · max {rec['max']} s over "
        f"{rec['kills_holding_work']} kills holding work · unrecovered {rec['unrecovered']}",
        *(f"            {kind}: p50 {r['p50']} s · max {r['max']} s ({r['kills']} kills)"
          for kind, r in rec["by_kind"].items()),
    ]  # fmt: skip
    lines += invariant_lines(fig)
    lines.append("result      " + ("every invariant holds" if fig["ok"] else "INVARIANTS VIOLATED"))
    return "\n".join(lines)


def _redis_fault(fig: Mapping[str, Any]) -> str:
    if "failovers" in fig:
        return (
            f"master failovers {fig['failovers']} (a replica promoted after {fig['promoted_s']} s"
            f", durability {fig['durability']})"
        )
    return f"redis restarts {fig.get('redis_restarts', 0)} ({fig.get('redis_down_s', 0)} s down)"
