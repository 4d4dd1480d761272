"""The runs a chaos session submits: a seeded mix of kinds and protocols (pure).

Each kind names a scripted-model scenario (``shared/standins/scenarios/chaos-*.json``) and the tools
it uses, and so the effect kinds it exercises:

* ``travel``   — two parallel reads (train status, weather); the model drops some streams;
* ``workshop`` — a read and a write needing an events-lead's approval in one turn; the
  simulated approver approves or denies it, or leaves it to expire (planned here, per run);
  some streams drop;
* ``hold``     — an idempotent write (``hold_seat``), retried with its operation id.

The run id is fixed here (a session has its own key prefix, so ids never clash) and written into
the run's input, so what the model received (the scripted server's request log) can be matched
to its run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
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

    @property
    def marker(self) -> str:
        return f"[chaos {self.run_id}]"

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


def plan_runs(count: int, seed: int) -> list[PlannedRun]:
    """``count`` runs: kinds by weight, protocols in turn, approvals mostly approved."""
    rng = random.Random(seed)
    names = list(KINDS)
    weights = [KINDS[n].weight for n in names]
    runs = []
    for i in range(count):
        kind = KINDS[rng.choices(names, weights)[0]]
        runs.append(
            PlannedRun(
                run_id=f"chaos-{seed}-{i:04d}",
                kind=kind.name,
                api=APIS[i % len(APIS)],
                scenario=kind.scenario,
                tool_modules=kind.tool_modules,
                question=kind.question,
                decision=_decision(rng.random()),
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
