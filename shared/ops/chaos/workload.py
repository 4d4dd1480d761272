"""The runs a chaos session submits: a seeded mix of kinds and protocols (pure).

Each kind names a scripted-model scenario (``shared/standins/scenarios/chaos-*.json``) and the tools
it uses, and so the effect kinds it exercises:

* ``travel``   — two parallel reads (train status, weather); the model drops some streams;
* ``workshop`` — a read and a write needing an events-lead's approval in one turn; the
  simulated approver approves or denies it, or leaves it to expire (planned here, per run);
  some streams drop;
* ``hold``     — an idempotent write (``hold_seat``), retried with its operation id.

People act on a seeded share of runs (`people_plan`, from a generator of its own, so the mix
above stays what the seed made it): the run's user cancels it at a random moment, or just as
its write is in flight (that run's booking service answers slowly); or the write's answer is
lost and every lookup of it fails, so it stays unresolved until a person resolves it — after
looking at the booking service, as a human would — or asks for a recheck.

The run's user also replies to a seeded share of runs (`reply_plan`, a generator of its own
again): once the run has settled (policy ``reject``: admitted only if it completed), or while
it is still busy (policy ``enqueue``: admitted once it completes).  The scenarios answer such a
follow-up turn (``assistant_turns: 2``), echoing the user's text.

The run id is fixed here (a session has its own key prefix, so ids never clash) and written into
the run's input, so what the model received (the scripted server's request log) can be matched
to its run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Literal

from callgate.records import Api
from callgate.tools.registry import load_registry

APIS: tuple[Api, ...] = ("openai-responses", "openai-chat", "anthropic-messages")
DENY_SHARE = 0.15
"""Share of approvals the simulated approver denies (the model is told why)."""
EXPIRE_SHARE = 0.1
"""Share of approvals nobody decides: they expire (the ingress's job or its sweep) and the
model is told so, whatever was killed meanwhile."""
EXPIRE_TTL_S = 2.0
"""The approval TTL of a run whose approval is left to expire (others keep the default)."""
Decision = Literal["approve", "deny", "expire"]
Cancel = Literal["no", "at", "in_flight"]
"""No cancel; a cancel `cancel_after_s` after submission; a cancel once a write is in flight."""
Resolve = Literal["no", "truth", "recheck"]
"""Nobody resolves; a person resolves as the booking service says; a person asks a recheck."""
CANCEL_SHARE = 0.12
"""Share of all runs their user cancels at a random moment (some have ended by then)."""
CANCEL_WITHIN_S = 2.5
IN_FLIGHT_SHARE = 0.12
"""Share of runs with an approved or unapproved write that are cancelled mid-write."""
IN_FLIGHT_DELAYS_S = (1.5, 6.0)
"""How long the booking service sits on such a write (committed first): answered after the
cancel, or after the tool's 5 s timeout (then reconciled)."""
RESOLVE_SHARE = 0.3
"""Share of approved reservations whose answer is lost and never found by lookups."""
RECHECK_SHARE = 0.3
"""Of those, the share a person sends back for a recheck (after lookups work again)."""
Reply = Literal["no", "after", "busy"]
"""No reply; a ``reject`` reply once the run has settled; an ``enqueue`` reply while busy."""
REPLY_SHARE = 0.1
"""Share of runs their user replies to once they have settled (policy reject)."""
ENQUEUE_SHARE = 0.05
"""Share of runs their user replies to while they are busy (policy enqueue)."""
BUSY_WITHIN_S = 1.0
"""An enqueued reply is sent within this long after submission."""
FOLLOW_UP = "Thanks! Anything else I should know?"


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    scenario: str
    tool_modules: tuple[str, ...]
    effect: str
    """The effect kind of its tool with the strongest effect (read < idempotent < write)."""
    question: str
    weight: int


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("travel", "chaos-travel", ("callgate.standins.demo.travel",), "read",
             "Is G1234 on time on 2026-12-20, and the weather in Hangzhou?", 4),
        Kind("workshop", "chaos-workshop", ("callgate.standins.demo.workshop",), "write",
             "Book me a seat at ws-200.", 4),
        Kind("hold", "chaos-hold", ("callgate.standins.demo.holds",), "idempotent_write",
             "Hold me a seat at ws-200.", 2),
    )
}  # fmt: skip
WALK_SCENARIOS = {"read": "travel-parallel", "idempotent_write": "chaos-hold",
                  "write": "chaos-reserve"}  # fmt: skip
"""The crash-point walk: one scenario per effect kind, each using only tools of that kind."""


@dataclass(frozen=True, slots=True)
class PlannedRun:
    run_id: str
    kind: str
    api: Api
    scenario: str
    tool_modules: tuple[str, ...]
    question: str
    decision: Decision = "approve"
    """What becomes of this run's approval, if it asks for one: the simulated approver
    approves or denies it, or leaves it to expire."""
    cancel: Cancel = "no"
    cancel_after_s: float = 0.0
    resolve: Resolve = "no"
    write_delay_s: float = 0.0
    """``cancel == "in_flight"``: how long the booking service sits on the write."""
    lost_reserve: Literal["commit_then_drop", "unreachable"] = "commit_then_drop"
    """``resolve != "no"``: how the write's answer is lost (committed, or never arrived)."""
    reply: Reply = "no"
    reply_after_s: float = 0.0
    """``reply == "busy"``: when the enqueued reply is sent, after submission."""

    @property
    def marker(self) -> str:
        return f"[chaos {self.run_id}]"

    @property
    def reply_policy(self) -> Literal["reject", "enqueue"]:
        return "enqueue" if self.reply == "busy" else "reject"

    @property
    def reply_text(self) -> str:
        """The follow-up input (with the marker, so the model's request is matched to its run)."""
        return f"{self.marker} {FOLLOW_UP}"

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "run_id": self.run_id,
            "api": self.api,
            "model": self.scenario,
            "input": f"{self.marker} {self.question}",
            "identity": {"user": "alice"},
            "allowed_tools": list(load_registry(self.tool_modules).names()),
            "max_turns": 4,
        }
        if self.decision == "expire":
            spec["approval_ttl_s"] = EXPIRE_TTL_S
        return spec

    def booking_faults(self) -> dict[str, Any] | None:
        """The faults the booking service keeps for this run alone (None: the session's)."""
        if self.cancel == "in_flight":
            slow = {"mode": "slow", "delay_s": self.write_delay_s, "commit": "before"}
            return {"reserve": {**slow, "count": 1}}
        if self.resolve != "no":
            return {
                "reserve": {"mode": self.lost_reserve, "count": 1},
                "lookup": {"mode": "lookup_unknown"},
            }
        return None


def people_plan(plan: PlannedRun, rng: random.Random) -> PlannedRun:
    """What people do to ``plan``: every draw is made, whatever it decides, so one run's plan
    never shifts another's."""
    cancel_at, after_s, in_flight, resolve, how, lost = (rng.random() for _ in range(6))
    approved = plan.kind == "workshop" and plan.decision == "approve"
    writes = approved or plan.kind == "hold"
    if writes and in_flight < IN_FLIGHT_SHARE:
        delay = IN_FLIGHT_DELAYS_S[int(how * len(IN_FLIGHT_DELAYS_S))]
        return replace(plan, cancel="in_flight", write_delay_s=delay)
    if approved and resolve < RESOLVE_SHARE:
        plan = replace(
            plan,
            resolve="recheck" if how < RECHECK_SHARE else "truth",
            lost_reserve="unreachable" if lost < 0.4 else "commit_then_drop",
        )
    if cancel_at < CANCEL_SHARE:
        plan = replace(plan, cancel="at", cancel_after_s=round(after_s * CANCEL_WITHIN_S, 2))
    return plan


def reply_plan(plan: PlannedRun, rng: random.Random) -> PlannedRun:
    """Whether the run's user replies to ``plan`` (both draws are always made)."""
    which, after_s = rng.random(), rng.random()
    if which < REPLY_SHARE:
        return replace(plan, reply="after")
    if which < REPLY_SHARE + ENQUEUE_SHARE:
        return replace(plan, reply="busy", reply_after_s=round(after_s * BUSY_WITHIN_S, 2))
    return plan


def plan_runs(count: int, seed: int) -> list[PlannedRun]:
    """``count`` runs: kinds by weight, protocols in turn, approvals mostly approved."""
    rng = random.Random(seed)
    people = random.Random(f"{seed}:people")
    replies = random.Random(f"{seed}:replies")
    names = list(KINDS)
    weights = [KINDS[n].weight for n in names]
    runs = []
    for i in range(count):
        kind = KINDS[rng.choices(names, weights)[0]]
        runs.append(
            reply_plan(
                people_plan(
                    PlannedRun(
                        run_id=f"chaos-{seed}-{i:04d}",
                        kind=kind.name,
                        api=APIS[i % len(APIS)],
                        scenario=kind.scenario,
                        tool_modules=kind.tool_modules,
                        question=kind.question,
                        decision=_decision(rng.random()),
                    ),
                    people,
                ),
                replies,
            )
        )
    return runs


def _decision(draw: float) -> Decision:
    if draw < DENY_SHARE:
        return "deny"
    return "expire" if draw < DENY_SHARE + EXPIRE_SHARE else "approve"


def walk_runs(effect: str) -> list[PlannedRun]:
    """One run per protocol whose tools all have ``effect`` (the walk needs no mix)."""
    kind = next(k for k in KINDS.values() if k.effect == effect)
    scenario = WALK_SCENARIOS[effect]
    modules = ("callgate.standins.demo.workshop",) if effect == "write" else kind.tool_modules
    return [
        PlannedRun(f"walk-{effect}-{api}", effect, api, scenario, modules,
                   kind.question)
        for api in APIS
    ]  # fmt: skip
