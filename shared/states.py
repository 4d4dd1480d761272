"""The run and call state machines of DESIGN §4, as pure tables.

No I/O here: the store asks `check_run` / `check_call` before it builds the atomic
compare-and-set that makes a transition durable.
"""

from __future__ import annotations

from enum import StrEnum

from callgate.errors import TransitionError


class RunState(StrEnum):
    QUEUED = "queued"
    AWAITING_MODEL = "awaiting_model"
    VALIDATING = "validating"
    EXECUTING = "executing"
    PAUSED_APPROVAL = "paused_approval"
    PAUSED_UNKNOWN_OUTCOME = "paused_unknown_outcome"
    PAUSED_INCOMPLETE = "paused_incomplete"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    HANDED_OFF = "handed_off"
    CANCELLED = "cancelled"


class CallState(StrEnum):
    REQUESTED = "requested"
    REJECTED = "rejected"
    NEEDS_APPROVAL = "needs_approval"
    ALLOWED = "allowed"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILING = "reconciling"
    UNRESOLVED = "unresolved"
    CANCELLED = "cancelled"


R = RunState
C = CallState

RUN_TERMINAL = frozenset({R.COMPLETED, R.FAILED, R.REFUSED, R.HANDED_OFF, R.CANCELLED})
RUN_PAUSED = frozenset({R.PAUSED_APPROVAL, R.PAUSED_UNKNOWN_OUTCOME, R.PAUSED_INCOMPLETE})
_RUN_ENDS = RUN_TERMINAL - {R.COMPLETED, R.REFUSED}
"""Ends any live run may reach: failure, hand-off, cancellation."""

RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    R.QUEUED: frozenset({R.AWAITING_MODEL}) | _RUN_ENDS,
    # awaiting_model -> awaiting_model: the next turn (e.g. asking the model to fix an answer).
    R.AWAITING_MODEL: frozenset(
        {R.AWAITING_MODEL, R.VALIDATING, R.PAUSED_INCOMPLETE, R.COMPLETED, R.REFUSED}
    )
    | _RUN_ENDS,
    R.VALIDATING: frozenset({R.EXECUTING, R.PAUSED_APPROVAL, R.AWAITING_MODEL}) | _RUN_ENDS,
    R.EXECUTING: frozenset({R.AWAITING_MODEL, R.PAUSED_APPROVAL, R.PAUSED_UNKNOWN_OUTCOME})
    | _RUN_ENDS,
    R.PAUSED_APPROVAL: frozenset({R.EXECUTING, R.AWAITING_MODEL, R.PAUSED_UNKNOWN_OUTCOME})
    | _RUN_ENDS,
    R.PAUSED_UNKNOWN_OUTCOME: frozenset({R.EXECUTING, R.AWAITING_MODEL}) | _RUN_ENDS,
    R.PAUSED_INCOMPLETE: frozenset({R.AWAITING_MODEL}) | _RUN_ENDS,
    **{end: frozenset() for end in RUN_TERMINAL},
    # A person may resume a run handed off at its budget, with the same or a larger one (one
    # handed off mid-turn takes its turn up again: validating or executing); a completed run
    # takes a follow-up input as its next turn.
    R.HANDED_OFF: frozenset({R.AWAITING_MODEL, R.VALIDATING, R.EXECUTING}),
    R.COMPLETED: frozenset({R.AWAITING_MODEL}),
}

CALL_TERMINAL = frozenset({C.REJECTED, C.DENIED, C.EXPIRED, C.SUCCEEDED, C.FAILED, C.CANCELLED})
"""States the loop treats as final: the call's result can go back to the model."""

CALL_TRANSITIONS: dict[CallState, frozenset[CallState]] = {
    # A call not yet started when its run is cancelled ends cancelled; one in flight does not.
    C.REQUESTED: frozenset({C.REJECTED, C.NEEDS_APPROVAL, C.ALLOWED, C.CANCELLED}),
    C.NEEDS_APPROVAL: frozenset({C.APPROVED, C.DENIED, C.EXPIRED, C.CANCELLED}),
    C.ALLOWED: frozenset({C.EXECUTING, C.CANCELLED}),
    C.APPROVED: frozenset({C.EXECUTING, C.CANCELLED}),
    # executing -> executing: a read (or idempotent write) re-taken after its executor died.
    # executing -> allowed|approved: a write its executor did not send, because no replica
    # confirmed its intent (`CALLGATE_WRITE_DURABILITY=replica`): taken back, retried later.
    C.EXECUTING: frozenset({C.EXECUTING, C.SUCCEEDED, C.FAILED, C.UNKNOWN, C.ALLOWED, C.APPROVED}),
    C.UNKNOWN: frozenset({C.RECONCILING}),
    C.RECONCILING: frozenset({C.RECONCILING, C.SUCCEEDED, C.FAILED, C.UNRESOLVED}),
    # A human may resolve an unresolved call, or ask for another check.
    C.UNRESOLVED: frozenset({C.RECONCILING, C.SUCCEEDED, C.FAILED}),
    **{end: frozenset() for end in CALL_TERMINAL},
}


def check_run(from_state: RunState | str, to_state: RunState | str) -> None:
    """Raise `TransitionError` unless the run may move ``from_state -> to_state``."""
    _check("run", RUN_TRANSITIONS, RunState, from_state, to_state)


def check_call(from_state: CallState | str, to_state: CallState | str) -> None:
    """Raise `TransitionError` unless the call may move ``from_state -> to_state``."""
    _check("call", CALL_TRANSITIONS, CallState, from_state, to_state)


def run_sources(to_state: RunState) -> frozenset[RunState]:
    """Every state from which a run may reach ``to_state`` (the CAS guard)."""
    return frozenset(s for s, targets in RUN_TRANSITIONS.items() if to_state in targets)


def call_sources(to_state: CallState) -> frozenset[CallState]:
    """Every state from which a call may reach ``to_state`` (the CAS guard)."""
    return frozenset(s for s, targets in CALL_TRANSITIONS.items() if to_state in targets)


def _check(
    machine: str,
    table: dict[RunState, frozenset[RunState]] | dict[CallState, frozenset[CallState]],
    enum: type[RunState] | type[CallState],
    from_state: str,
    to_state: str,
) -> None:
    targets = table.get(from_state)  # type: ignore[call-overload]
    if targets is not None and to_state in targets:  # a legal move: every step makes some
        return
    try:
        source, target = enum(from_state), enum(to_state)
    except ValueError as exc:
        raise TransitionError(machine, str(from_state), str(to_state)) from exc
    if target not in table[source]:  # type: ignore[index]
        raise TransitionError(machine, source.value, target.value)
