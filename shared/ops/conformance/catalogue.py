"""The regression catalogue (DESIGN §11) as data: what each case runs and what must be seen.

A case names a scripted-model scenario (``shared/standins/scenarios/*.json``), the demo tools, the
faults to arm for its run only, and what a correct runtime shows afterwards: the states the
run settles in, how often the demo services saw each tool execute, how each call ended (and
through which states), and how many reservations the booking service made.  Every case runs
once per protocol; nothing here depends on the protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from callgate.records import Api

APIS: tuple[Api, ...] = ("openai-responses", "openai-chat", "anthropic-messages")
TRAVEL = "callgate.standins.demo.travel"
WORKSHOP = "callgate.standins.demo.workshop"
APPROVER = "carol"
"""Who approves writes; the runner's system maps carol to the events-lead role."""
PAUSE = "paused_approval"

_ASKED = ("requested",)
_READ = (*_ASKED, "allowed", "executing")
_APPROVED = (*_ASKED, "needs_approval", "approved", "executing")
_RECONCILED = (*_APPROVED, "unknown", "reconciling", "succeeded")
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


@dataclass(frozen=True)
class Case:
    """One row of the matrix."""

    id: str
    title: str
    scenario: str
    tools: str
    input: str
    states: tuple[str, ...]
    """The states the run settles in, in order: a pause (the runner then acts), then the end."""
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

    @property
    def pauses_for_approval(self) -> bool:
        return self.states[0] == PAUSE


def _approved_reservation(case_id: str, title: str, call: CallExpectation, **kw: Any) -> Case:
    """alice reserves a lab seat, carol approves, exactly one reservation must result."""
    return Case(
        case_id, title, "conf-reserve", WORKSHOP, "Book me into the open lab.",
        (PAUSE, "completed"), {"reserve_seat": 1}, (call,), effects=1, **kw,
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
)  # fmt: skip


def select(case_ids: tuple[str, ...] = ()) -> tuple[Case, ...]:
    """The cases named (all when none), in catalogue order; ValueError names unknown ids."""
    known = {case.id for case in CASES}
    unknown = [c for c in case_ids if c not in known]
    if unknown:
        raise ValueError(f"unknown case {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return tuple(case for case in CASES if not case_ids or case.id in case_ids)
