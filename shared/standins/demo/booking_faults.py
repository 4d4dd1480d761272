"""Fault injection for the demo booking service: the ways a write's answer gets lost.

``POST /_faults`` takes ``{endpoint: fault | null}`` for the endpoints ``seats``,
``eligibility``, ``reserve`` and ``lookup``; ``null`` clears.  A fault is::

    {"mode": "commit_then_drop" | "slow" | "reject" | "unreachable" | "lookup_unknown",
     "count": 2,                       # the next N requests (default: every request), or
     "probability": 0.3, "seed": 7,    # chaos: each request independently, reproducibly
     "delay_s": 1.0, "commit": "before" | "after",      # slow
     "status": 409 | 422, "message": "…"}               # reject

``commit_then_drop`` commits the reservation and closes the connection without an answer
(reserve only); ``slow`` waits ``delay_s`` before answering, committing before or after the
wait; ``reject`` answers a business error; ``unreachable`` closes the connection at once
without committing; ``lookup_unknown`` makes the reservation lookup answer 503 (lookup only).

``POST /_faults?run_id=R`` arms faults for the requests of run R only (the tools send
``X-Callgate-Run-Id``); such a request meets its run's fault first, else the global one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ENDPOINTS = ("seats", "eligibility", "reserve", "lookup")
Mode = Literal["commit_then_drop", "slow", "reject", "unreachable", "lookup_unknown"]
_ONLY_ON: dict[str, str] = {"commit_then_drop": "reserve", "lookup_unknown": "lookup"}


class Fault(BaseModel):
    """One injected misbehaviour for one endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode
    count: int | None = Field(default=None, ge=1)
    """Apply to the next N requests only; with neither this nor ``probability``: every one."""
    probability: float | None = Field(default=None, ge=0, le=1)
    """Apply to each request with this chance, drawn from a generator seeded by ``seed``."""
    seed: int = 0
    delay_s: float = Field(default=1.0, ge=0, le=60)
    """``slow``: how long to wait before answering."""
    commit: Literal["before", "after"] = "before"
    """``slow`` on reserve: commit before the wait (the effect exists while the caller
    times out) or after it (the effect appears only later)."""
    status: Literal[409, 422] = 409
    """``reject``: the business error's status."""
    message: str = Field(default="rejected by the booking service", max_length=200)
    """``reject``: the business error's message (what the model would be told)."""

    @model_validator(mode="after")
    def _count_or_probability(self) -> Fault:
        if self.count is not None and self.probability is not None:
            raise ValueError("give count or probability, not both")
        return self


@dataclass
class ArmedFault:
    """A fault with its remaining count and its own random stream."""

    fault: Fault
    remaining: int | None
    rng: random.Random

    @classmethod
    def arm(cls, fault: Fault) -> ArmedFault:
        return cls(fault, fault.count, random.Random(fault.seed))

    def fire(self) -> bool:
        """Whether this request is hit; consumes one of ``count``."""
        if self.fault.probability is not None:
            return self.rng.random() < self.fault.probability
        if self.remaining is None:
            return True
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True

    @property
    def spent(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def describe(self) -> dict[str, Any]:
        return {**self.fault.model_dump(), "remaining": self.remaining}


@dataclass
class Faults:
    """The armed fault of every endpoint (at most one each)."""

    armed: dict[str, ArmedFault] = field(default_factory=dict)

    def configure(self, update: Any) -> None:
        """Apply ``{endpoint: fault | null}``; raises ValueError (or ValidationError) when wrong.

        Everything is validated before anything changes, so a bad request arms nothing.
        """
        if not isinstance(update, dict) or not set(update) <= set(ENDPOINTS):
            raise ValueError(f"faults must be an object with keys among {ENDPOINTS}")
        parsed: dict[str, Fault | None] = {}
        for endpoint, spec in update.items():
            fault = None if spec is None else Fault.model_validate(spec)
            only = _ONLY_ON.get(fault.mode) if fault is not None else None
            if only is not None and only != endpoint:
                raise ValueError(f"fault {fault.mode if fault else ''} applies only to {only}")
            parsed[endpoint] = fault
        for endpoint, fault in parsed.items():
            if fault is None:
                self.armed.pop(endpoint, None)
            else:
                self.armed[endpoint] = ArmedFault.arm(fault)

    def take(self, endpoint: str) -> Fault | None:
        """The fault that hits this request of ``endpoint``, if any."""
        armed = self.armed.get(endpoint)
        if armed is None or not armed.fire():
            return None
        if armed.spent:
            del self.armed[endpoint]
        return armed.fault

    def describe(self) -> dict[str, Any]:
        return {endpoint: armed.describe() for endpoint, armed in self.armed.items()}

    def clear(self) -> None:
        self.armed.clear()


@dataclass
class ScopedFaults:
    """Global faults plus faults armed for one run, so cases running at once stay apart."""

    shared: Faults = field(default_factory=Faults)
    by_run: dict[str, Faults] = field(default_factory=dict)

    def configure(self, update: Any, run_id: str | None = None) -> None:
        if run_id is None:
            self.shared.configure(update)
            return
        faults = self.by_run.get(run_id, Faults())
        faults.configure(update)
        self.by_run[run_id] = faults

    def take(self, endpoint: str, run_id: str | None) -> Fault | None:
        own = self.by_run.get(run_id) if run_id is not None else None
        fault = own.take(endpoint) if own is not None else None
        return fault if fault is not None else self.shared.take(endpoint)

    def describe(self, run_id: str | None = None) -> dict[str, Any]:
        faults = self.shared if run_id is None else self.by_run.get(run_id, Faults())
        return faults.describe()

    def clear(self) -> None:
        self.shared.clear()
        self.by_run.clear()
