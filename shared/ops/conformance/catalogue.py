"""The regression catalogue (DESIGN §14) as data: what each case runs and what must be seen.

A case names a scripted-model scenario (``shared/standins/scenarios/*.json``), the demo tools, the
faults to arm for its run only, what a person does once the run gets somewhere (`Then`), and
what a correct runtime shows afterwards: the states the run settles in, how often the demo
services saw each tool execute, how each call ended (and through which states), and how many
reservations the booking service made.  Every case runs once per protocol; nothing here
depends on the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from callgate.decisions.claims import ResolveOutcome
from callgate.records import Api

APIS: tuple[Api, ...] = ("openai-responses", "openai-chat", "anthropic-messages")
TRAVEL = "callgate.standins.demo.travel"
WORKSHOP = "callgate.standins.demo.workshop"
APPROVER = "carol"
"""Who approves writes; the runner's system maps carol to the events-lead role."""
PAUSE = "paused_approval"
UNKNOWN_PAUSE = "paused_unknown_outcome"
WRITE_IN_FLIGHT = "write in flight"
"""A `Then.when` that is no run state: once approved, the write is ``executing`` and the booking
service has its request (nothing settles there, so the driver watches for it)."""

_ASKED = ("requested",)
_READ = (*_ASKED, "allowed", "executing")
_APPROVED = (*_ASKED, "needs_approval", "approved", "executing")
_RECONCILED = (*_APPROVED, "unknown", "reconciling", "succeeded")
_RESOLVED = (*_APPROVED, "unknown", "reconciling", "unresolved", "succeeded")
CONFIRMED = MappingProxyType({"reservation_id": "r-confirmed-by-carol"})
"""The result carol confirms for a lost reservation: what the model must then be told."""
NO_READS = MappingProxyType({"get_train_status": 0, "get_weather": 0})


@dataclass(frozen=True)
class CallExpectation:
    """How one call of the run must end, in provider order."""

    tool: str
    state: str
    code: str | None = None
    """The error code of its result (None: an ``ok`` result)."""
    path: tuple[str, ...] = ()
    """Every state it passes through, in order, from its event log."""
    reason: str | None = None
    """Text one of its transitions' reasons must hold: evidence of *why* it went that way."""
    decision: str | None = None
    """The validator's decision it must get (None: not checked); a recorded case sets it."""


@dataclass(frozen=True)
class Then:
    """A person's signed decision the driver posts once the run reaches ``when``: the way out
    of a pause (DESIGN §10) that a case exercises, beyond the approval every write gets."""

    act: Literal["resolve", "cancel"]
    when: str
    """The run state it waits for (after approving, if that is the pause), or `WRITE_IN_FLIGHT`."""
    by: str
    """Who decides: a person of the system's keyring (carol: events-lead, so a resolver of
    reserve_seat; operator: may cancel any run).  alice has no key there, on purpose: running
    conformance adds no one to the machine's keyring."""
    outcome: ResolveOutcome = "applied"
    """``resolve``: what the person says happened to the write."""
    result: Mapping[str, Any] | None = None
    """``resolve`` applied: the result they confirm, which the model must receive as is."""


@dataclass(frozen=True)
class Case:
    """One row of the matrix."""

    id: str
    title: str
    scenario: str
    tools: str
    input: str
    states: tuple[str, ...]
    """The states the run settles in, in order: pauses (the runner acts on each), then the end."""
    executions: Mapping[str, int] = field(default_factory=dict)
    """Executions per tool as the demo services count them; a tool not named: none."""
    calls: tuple[CallExpectation, ...] = ()
    effects: int = 0
    """Reservations the booking service must hold for this run at the end."""
    finish_order: tuple[str, ...] = ()
    """Tools in the order their calls must reach a final state (empty: not checked)."""
    travel_config: Mapping[str, Any] | None = None
    """Travel service ``/_config`` for this run only."""
    booking_faults: Mapping[str, Any] | None = None
    """Booking service ``/_faults`` for this run only."""
    crash: str | None = None
    """Worker kind to SIGKILL once the approved write is in flight."""
    identity: Mapping[str, Any] = field(default_factory=lambda: {"user": "alice"})
    then: Then | None = None
    """A person's action beyond approval; after a ``cancel`` the model must hear nothing more."""


def _approved_reservation(
    case_id: str,
    title: str,
    call: CallExpectation,
    states: tuple[str, ...] = (PAUSE, "completed"),
    **kw: Any,
) -> Case:
    """alice reserves a lab seat, carol approves, exactly one reservation must result."""
    return Case(
        case_id, title, "conf-reserve", WORKSHOP, "Book me into the open lab.",
        states, {"reserve_seat": 1}, (call,), effects=1, **kw,
    )  # fmt: skip


CASES: tuple[Case, ...] = (
    Case(
        "final-answer", "final answer without tools", "final-answer", TRAVEL,
        "What is the capital of PotatoLand?", ("completed",), NO_READS,
    ),
    Case(
        "one-call", "one call", "conf-one-call", TRAVEL, "Is my train G1234 on time?",
        ("completed",), {"get_train_status": 1},
        (CallExpectation("get_train_status", "succeeded", path=(*_READ, "succeeded")),),
    ),
    Case(
        "out-of-order", "several calls completing out of order", "travel-parallel", TRAVEL,
        "Train G1234 and the weather in Hangzhou?", ("completed",),
        {"get_train_status": 1, "get_weather": 1},
        (
            CallExpectation("get_train_status", "succeeded", path=(*_READ, "succeeded")),
            CallExpectation("get_weather", "succeeded", path=(*_READ, "succeeded")),
        ),
        # The first call is slowed for this run only, so the second finishes first.
        finish_order=("get_weather", "get_train_status"),
        travel_config={"train_status": {"delay_s": 0.8}},
    ),
    Case(
        "unknown-tool", "unknown tool", "conf-unknown-tool", TRAVEL, "Book me a flight.",
        ("completed",), NO_READS,
        (CallExpectation("book_flight", "rejected", "unknown_tool", (*_ASKED, "rejected")),),
    ),
    Case(
        "invalid-arguments", "invalid arguments", "conf-invalid-args", TRAVEL,
        "Is train X99 on time?", ("completed",), {"get_train_status": 0},
        (CallExpectation("get_train_status", "rejected", "invalid_arguments",
                         (*_ASKED, "rejected")),),
    ),
    Case(
        "truncated", "stream truncated mid-call", "travel-truncated", TRAVEL,
        "Is my train G1234 on time?", ("paused_incomplete",), {"get_train_status": 0},
    ),
    Case(
        "tool-error", "tool error", "conf-tool-error", TRAVEL, "Weather in Atlantis?",
        ("completed",), {"get_weather": 1},
        (CallExpectation("get_weather", "failed", "not_found", (*_READ, "failed")),),
    ),
    _approved_reservation(
        "approval", "approval pause (and resume)",
        CallExpectation("reserve_seat", "succeeded", path=(*_APPROVED, "succeeded")),
    ),
    Case(
        "server-rejection", "server-side rejection (authorization / precondition)",
        "conf-reserve-refused", WORKSHOP, "Book bob into the lab, and me into ws-102.",
        ("completed",), {"reserve_seat": 0},
        (
            CallExpectation("reserve_seat", "rejected", "not_authorized", (*_ASKED, "rejected")),
            CallExpectation("reserve_seat", "rejected", "precondition_failed",
                            (*_ASKED, "rejected"), reason="no seats left"),
        ),
    ),
    _approved_reservation(
        "connection-lost", "connection lost after a write",
        CallExpectation("reserve_seat", "succeeded", path=_RECONCILED,
                        reason="reconciled: applied"),
        booking_faults={"reserve": {"mode": "commit_then_drop", "count": 1}},
    ),
    _approved_reservation(
        "crash-recovery", "process crash and recovery",
        CallExpectation("reserve_seat", "succeeded", path=_RECONCILED,
                        reason="executor died while the write was in flight"),
        # Committed at once, answered much later: the executor is killed in between.
        booking_faults={"reserve": {"mode": "slow", "delay_s": 20, "commit": "before",
                                    "count": 1}},
        crash="executor",
    ),
    Case(
        "refusal", "model refusal", "refusal", TRAVEL, "Help me with something forbidden.",
        ("refused",), NO_READS,
    ),
    # Added since (DESIGN §14): the ways out of a pause that a person takes (§10).
    _approved_reservation(
        "resolved-by-person", "unknown outcome resolved by a person",
        CallExpectation("reserve_seat", "succeeded", path=_RESOLVED,
                        reason="applied, confirmed by carol"),
        (PAUSE, UNKNOWN_PAUSE, "completed"),
        # The answer is lost and every lookup is inconclusive: only a person can say.
        booking_faults={"reserve": {"mode": "commit_then_drop", "count": 1},
                        "lookup": {"mode": "lookup_unknown"}},
        then=Then("resolve", UNKNOWN_PAUSE, "carol", "applied", CONFIRMED),
    ),
    _approved_reservation(
        "cancel-in-flight", "cancel with a write in flight",
        # Cancelling does not cancel the write: it ends as it truly did, answered late.
        CallExpectation("reserve_seat", "succeeded", path=(*_APPROVED, "succeeded")),
        (PAUSE, "cancelled"),
        # Committed at once, answered 3 s later (within the tool's 5 s timeout).
        booking_faults={"reserve": {"mode": "slow", "delay_s": 3, "commit": "before",
                                    "count": 1}},
        then=Then("cancel", WRITE_IN_FLIGHT, "operator"),
    ),
)  # fmt: skip


def select(case_ids: tuple[str, ...] = ()) -> tuple[Case, ...]:
    """The cases named (all when none), in catalogue order; ValueError names unknown ids."""
    known = {case.id for case in CASES}
    unknown = [c for c in case_ids if c not in known]
    if unknown:
        raise ValueError(f"unknown case {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return tuple(case for case in CASES if not case_ids or case.id in case_ids)
