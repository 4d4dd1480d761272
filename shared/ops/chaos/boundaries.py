"""Every deterministic crash point (`callgate.crashpoints.crash_point`) and the effect kinds
whose runs reach it, for the crash-point walk.

A boundary is named ``<worker>.<where>``; arming it (``CALLGATE_CRASH_AT``) makes the first
process of that worker that reaches it SIGKILL itself there.  ``<worker>.before_ack`` is the
generic one in the stream loop (after the handler's state change is durable, before the
runner's ack).  A handler whose last step carried the ack (`Delivery.ack_with`) has settled its
message by then, so on those paths the boundary checks that nothing is redone after a crash
that lost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

EFFECTS = ("read", "idempotent_write", "write")
"""The effect kinds of `callgate.records.Effect`, in the walk's order."""
_ALL = frozenset(EFFECTS)
_WRITE = frozenset({"write"})


@dataclass(frozen=True, slots=True)
class Boundary:
    name: str
    effects: frozenset[str]
    """Effect kinds whose runs pass this boundary (reconciliation and approvals: writes only)."""
    what: str


BOUNDARIES: tuple[Boundary, ...] = (
    Boundary("ingress.after_create", _ALL, "run record and first turn request written, job open"),
    Boundary("model_turn.after_request", _ALL, "model answered, nothing persisted"),
    Boundary("model_turn.after_outbox", _ALL, "turn outcome, next message and ack written"),
    Boundary("model_turn.before_ack", _ALL, "handler done, no runner ack yet"),
    Boundary("validator.before_ack", _ALL, "decisions and exec messages written"),
    Boundary("validator.mid_approval", _WRITE, "decision checked, approval not yet consumed"),
    Boundary("executor.after_take", _ALL, "write marked executing / read about to run"),
    Boundary("executor.after_request", _ALL, "external request answered, outcome not persisted"),
    Boundary("executor.after_persist", _ALL, "outcome, result message and ack written"),
    Boundary("executor.before_ack", _ALL, "handler done, no runner ack yet"),
    Boundary("reconciler.after_claim", _WRITE, "call marked reconciling, nothing asked yet"),
    Boundary("reconciler.after_check", _WRITE, "authoritative answer in hand, not persisted"),
    Boundary("reconciler.before_ack", _WRITE, "settlement written, message not acked"),
)


def boundary_names() -> list[str]:
    return [b.name for b in BOUNDARIES]


def reached_by(effect: str) -> list[Boundary]:
    """The boundaries a run whose tools have this effect kind must pass."""
    return [b for b in BOUNDARIES if effect in b.effects]
