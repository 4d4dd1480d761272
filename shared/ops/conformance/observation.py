"""What the runner saw of one cell, as plain data: the checker's only input.

Everything here comes from outside the code under test where it can: executions and effects
from the demo services' own counters, the results the model received from the scripted
model server's request log.  Only states, paths and results come from callgate's ledger and
event log — those are what is being checked against the expectation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ObservedCall:
    """One call of the run, in turn and provider order."""

    tool: str
    provider_call_id: str
    turn: int
    state: str
    result: Mapping[str, Any] | None
    path: tuple[str, ...]
    """Every state it passed through, from ``requested`` on (its event log)."""
    reasons: tuple[str, ...] = ()
    """The reasons its transitions recorded."""
    decision: str | None = None
    """The validator's decision (allowed, needs_approval, rejected; None: never decided)."""

    @property
    def code(self) -> str | None:
        """Its result's error code, None for an ``ok`` result or none."""
        if self.result is None or self.result.get("status") == "ok":
            return None
        error = self.result.get("error")
        return str(error.get("code")) if isinstance(error, Mapping) else None


@dataclass(frozen=True)
class Observation:
    """One run of one case on one protocol, as the runner saw it."""

    run_id: str
    states: tuple[str, ...]
    """Each state the run settled in (paused or ended), in order."""
    turns: int = 0
    """The run's turn at the end; calls of earlier turns were due back to the model."""
    reason: str | None = None
    executions: Mapping[str, int] = field(default_factory=dict)
    """Per tool, requests the demo services received from this run."""
    executions_at_pause: Mapping[str, int] | None = None
    """The same, taken while the run waited for approval (None: it never paused)."""
    effects: int = 0
    """Reservations the booking service created for this run."""
    calls: tuple[ObservedCall, ...] = ()
    last_request: Mapping[str, Any] | None = None
    """The body of the last request the model received for this run (None: none logged)."""
    model_requests: int = 0
    """How many requests the model received for this run."""
    finish_order: tuple[str, ...] = ()
    """Tools in the order their calls reached a final state."""
    crash: str | None = None
    """What the runner killed, and whether it came back."""
    acted: str | None = None
    """The person's action (the case's `Then`) the runner took, and the verdict on it."""
    model_requests_at_action: int | None = None
    """``model_requests`` once that action had taken effect."""
    error: str | None = None
    """Why the runner could not drive the cell to its end (a timeout, a refused submit)."""
