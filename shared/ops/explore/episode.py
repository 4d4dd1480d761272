"""One episode: a fresh world, two runs, up to `FAULT_EVENTS` chosen events (faults and
people among them), then the fault-free drain (deliveries, sweeps, time, and a person settling
what stayed unresolved, as the system of record says) until every run is at rest — each event
followed by the invariants, and the drain bounded (`DRAIN_LIMIT`): a run that does not come to
rest in it breaks liveness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.explore.checks import violations
from callgate.ops.explore.choices import Choices
from callgate.ops.explore.events import Event
from callgate.ops.explore.possible import Possible
from callgate.ops.explore.store import TOOL_NAMES
from callgate.ops.explore.world import USER, World

RUNS = 2
FAULT_EVENTS = 60
DRAIN_LIMIT = 300
MAX_TURNS = 3
DEADLINE_S = 3_600
WEIGHTS = {
    "deliver:model_turn": 6.0,
    "deliver:validator": 6.0,
    "deliver:executor": 6.0,
    "deliver:reconciler": 6.0,
    "redeliver:model_turn": 3.0,
    "redeliver:validator": 3.0,
    "redeliver:executor": 3.0,
    "redeliver:reconciler": 3.0,
    "start": 6.0,
    "sweep_approvals": 2.0,
    "sweep_deadlines": 1.0,
    "service_up": 2.0,
    "person:approve": 4.0,
    "person:resolve": 3.0,
    "person:deny": 1.0,
    "crash:executor": 1.5,
    "restart": 0.2,
    "service_down": 0.3,
    "tick": 0.4,
    "person:cancel": 0.3,
    "person:reply": 0.3,
    "duplicate": 0.6,
}
"""How likely each kind of event is while exploring (1 if not named): mostly progress, the
faults and people's actions often enough to meet every state."""


@dataclass(frozen=True)
class Step:
    label: str
    note: str | None
    fault: bool

    def line(self, number: int) -> str:
        """``  3. the label  [what it chose]``, with ``*`` after the number for an injected
        event (a fault or a person's action) rather than progress."""
        mark = "*" if self.fault else "."
        return f"{number:>3}{mark} {self.label}" + (f"  [{self.note}]" if self.note else "")


@dataclass
class Outcome:
    """What an episode did: its steps, the choices that made them, what broke (if anything)."""

    choices: list[str]
    steps: list[Step] = field(default_factory=list)
    violation: dict[str, list[str]] = field(default_factory=dict)
    triples: set[tuple[str, str, str]] = field(default_factory=set)
    chosen: int | None = None
    """How many steps were chosen before the drain (None: it broke before the drain)."""

    @property
    def broken(self) -> str | None:
        """The first invariant broken, by name."""
        return next(iter(self.violation), None)


def plans() -> list[PlannedRun]:
    return [
        PlannedRun(
            run_id=f"x{i}",
            kind="explore",
            api="openai-responses",
            scenario="explorer",
            tool_modules=(),
            question="Do what you can.",
        )
        for i in range(1, RUNS + 1)
    ]


def spec_of(plan: PlannedRun) -> dict[str, Any]:
    return {
        "run_id": plan.run_id,
        "api": plan.api,
        "model": plan.scenario,
        "input": f"{plan.marker} {plan.question}",
        "identity": {"user": USER},
        "allowed_tools": list(TOOL_NAMES),
        "max_turns": MAX_TURNS,
        "deadline_s": DEADLINE_S,
    }


async def run_episode(
    world: World,
    choices: Choices,
    seed: int,
    fault_events: int = FAULT_EVENTS,
    *,
    drain: bool = True,
) -> Outcome:
    """Run one schedule to its end or its first violation (without ``drain``, only its
    chosen events: what a violation found among them needs to be replayed)."""
    await world.reset(choices, seed)
    runs = plans()
    possible = Possible(world, runs, {p.run_id: spec_of(p) for p in runs})
    outcome = Outcome(choices.taken)
    for _ in range(fault_events):
        if choices.exhausted:
            break
        events = await possible.events(faults=True)
        if not events:
            break
        index = choices.event([e.label for e in events], [WEIGHTS.get(e.kind, 1.0) for e in events])
        if index is None:
            break
        event = events[index]
        if await _step(possible, event, outcome):
            return outcome
    outcome.chosen = len(outcome.steps)
    choices.faults_on = False
    if not drain:
        return outcome
    for _ in range(DRAIN_LIMIT):
        events = await possible.events(faults=False)
        if not events:
            break
        if await _step(possible, events[0], outcome):
            return outcome
    else:
        outcome.violation = {"liveness": [f"not at rest after {DRAIN_LIMIT} fault-free events"]}
        return outcome
    outcome.violation = await violations(world, runs, possible.people.sent, at_rest=True)
    return outcome


async def _step(possible: Possible, event: Event, outcome: Outcome) -> bool:
    """Make ``event`` happen and check; True if an invariant broke."""
    world = possible.world
    outcome.triples.add(await _triple(world, event))
    try:
        note = await event.act()
    except Exception as exc:  # nothing a worker does may escape its runner
        note = f"raised {type(exc).__name__}: {exc}"
        outcome.violation = {"unhandled_error": [f"{event.label}: {note}"]}
    outcome.steps.append(Step(event.label, note, event.fault))
    if not outcome.violation:
        outcome.violation = await violations(
            world, possible.plans, possible.people.sent, at_rest=False
        )
    return bool(outcome.violation)


async def _triple(world: World, event: Event) -> tuple[str, str, str]:
    """(run state, call state, event kind) before the event, for coverage."""
    run_state = call_state = "-"
    if event.run_id is not None:
        run = await world.ledger.get_run(event.run_id)
        run_state = "none" if run is None else str(run.status)
        if event.call_id is not None and run is not None:
            call = await world.ledger.get_call(event.run_id, event.call_id)
            call_state = "none" if call is None else str(call.state)
    return run_state, call_state, event.kind
