"""The run and call state machines: the tables, checked against DESIGN §4 and by property."""

from __future__ import annotations

from collections import deque
from enum import StrEnum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.errors import TransitionError
from callgate.states import (
    CALL_TERMINAL,
    CALL_TRANSITIONS,
    RUN_PAUSED,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    CallState,
    RunState,
    call_sources,
    check_call,
    check_run,
    run_sources,
)

C, R = CallState, RunState

# DESIGN §4, written out independently of shared/states.py, plus the two documented self-loops
# (a read re-taken after its executor died; another reconciliation check).
DESIGN_CALL_EDGES = {
    (C.REQUESTED, C.REJECTED), (C.REQUESTED, C.NEEDS_APPROVAL), (C.REQUESTED, C.ALLOWED),
    (C.NEEDS_APPROVAL, C.APPROVED), (C.NEEDS_APPROVAL, C.DENIED), (C.NEEDS_APPROVAL, C.EXPIRED),
    (C.ALLOWED, C.EXECUTING), (C.APPROVED, C.EXECUTING),
    (C.EXECUTING, C.SUCCEEDED), (C.EXECUTING, C.FAILED), (C.EXECUTING, C.UNKNOWN),
    (C.UNKNOWN, C.RECONCILING),
    (C.RECONCILING, C.SUCCEEDED), (C.RECONCILING, C.FAILED), (C.RECONCILING, C.UNRESOLVED),
    (C.EXECUTING, C.EXECUTING), (C.RECONCILING, C.RECONCILING),
    # A human resolves an unresolved call or asks for another check.
    (C.UNRESOLVED, C.RECONCILING), (C.UNRESOLVED, C.SUCCEEDED), (C.UNRESOLVED, C.FAILED),
    # A write whose intent no replica confirmed is taken back unsent (DESIGN §13).
    (C.EXECUTING, C.ALLOWED), (C.EXECUTING, C.APPROVED),
    # A run cancelled: its calls not yet started end cancelled (none in flight does).
    (C.REQUESTED, C.CANCELLED), (C.NEEDS_APPROVAL, C.CANCELLED), (C.ALLOWED, C.CANCELLED),
    (C.APPROVED, C.CANCELLED),
}  # fmt: skip
RESUMABLE = {
    R.HANDED_OFF: frozenset({R.AWAITING_MODEL, R.VALIDATING, R.EXECUTING}),
    R.COMPLETED: frozenset({R.AWAITING_MODEL}),
}
"""The ends a run may leave (DESIGN §10): resumed with the same or a larger budget (handed
off: at a turn's start, or mid-turn, where its turn is taken up again), or continued by a
follow-up input (completed)."""

MACHINES = [
    ("run", RunState, RUN_TRANSITIONS, RUN_TERMINAL, R.QUEUED, check_run),
    ("call", CallState, CALL_TRANSITIONS, CALL_TERMINAL, C.REQUESTED, check_call),
]


def _edges(table: dict[StrEnum, frozenset[StrEnum]]) -> set[tuple[StrEnum, StrEnum]]:
    return {(a, b) for a, targets in table.items() for b in targets}


def test_call_table_is_exactly_the_design() -> None:
    assert _edges(CALL_TRANSITIONS) == DESIGN_CALL_EDGES  # type: ignore[arg-type]


def test_run_table_keeps_the_design_invariants() -> None:
    # A run completes or is refused only on a model answer.
    assert run_sources(R.COMPLETED) == {R.AWAITING_MODEL}
    assert run_sources(R.REFUSED) == {R.AWAITING_MODEL}
    # Calls execute only after validation or a resolved pause, never straight from the model:
    # a run handed off mid-turn executes again only once its calls were decided.
    assert run_sources(R.EXECUTING) == {
        R.VALIDATING, R.PAUSED_APPROVAL, R.PAUSED_UNKNOWN_OUTCOME, R.HANDED_OFF
    }  # fmt: skip
    # Every live run can fail, hand off or be cancelled.
    for state in set(RunState) - RUN_TERMINAL:
        assert {R.FAILED, R.HANDED_OFF, R.CANCELLED} <= RUN_TRANSITIONS[state]
    # Pauses never end the run well by themselves.
    for state in RUN_PAUSED:
        assert R.COMPLETED not in RUN_TRANSITIONS[state]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m[0])
def test_every_state_is_reachable_and_can_end(machine: tuple) -> None:  # type: ignore[type-arg]
    _, enum, table, terminal, initial, _ = machine
    assert set(table) == set(enum), "every state has a row"
    seen, queue = {initial}, deque([initial])
    while queue:
        for nxt in table[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    assert seen == set(enum)
    # Liveness: from every state some terminal state is reachable (no trap but the ends).
    for start in enum:
        frontier, reach = [start], {start}
        while frontier:
            for nxt in table[frontier.pop()]:
                if nxt not in reach:
                    reach.add(nxt)
                    frontier.append(nxt)
        assert reach & terminal, f"{start} cannot end"


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m[0])
def test_terminal_states_have_no_exit(machine: tuple) -> None:  # type: ignore[type-arg]
    _, enum, table, terminal, _, check = machine
    for end in terminal:
        assert table[end] == RESUMABLE.get(end, frozenset())
        for target in set(enum) - RESUMABLE.get(end, frozenset()):
            with pytest.raises(TransitionError):
                check(end, target)


def test_transition_error_names_both_states() -> None:
    with pytest.raises(TransitionError) as caught:
        check_call(C.SUCCEEDED, C.EXECUTING)
    assert caught.value.from_state == "succeeded" and caught.value.to_state == "executing"
    assert "succeeded" in str(caught.value) and "executing" in str(caught.value)
    with pytest.raises(TransitionError, match="nonsense"):
        check_run("nonsense", R.QUEUED)


def test_sources_invert_the_table() -> None:
    for target in CallState:
        assert call_sources(target) == {s for s in CallState if target in CALL_TRANSITIONS[s]}
    for target in RunState:
        assert run_sources(target) == {s for s in RunState if target in RUN_TRANSITIONS[s]}


@settings(max_examples=300, deadline=None)
@given(machine=st.sampled_from(MACHINES), data=st.data())
def test_random_event_sequences_never_pass_an_illegal_transition(
    machine: tuple,  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    """Drive the machine with random requested targets (legal or not) through `check_*`."""
    _, enum, table, terminal, initial, check = machine
    state = initial
    ended = False
    steps = data.draw(st.lists(st.sampled_from(list(enum)), max_size=40))
    for target in steps:
        try:
            check(state, target)
        except TransitionError:
            assert target not in table[state]
            continue
        assert target in table[state], f"{state} -> {target} passed but is not in the table"
        assert not ended, f"left terminal state {state}"
        state = target
        ended = state in terminal and state not in RESUMABLE
    if ended:
        assert all(_raises(check, state, t) for t in enum)


@given(a=st.text(max_size=20), b=st.text(max_size=20))
def test_unknown_states_are_transition_errors(a: str, b: str) -> None:
    for check, enum in ((check_run, RunState), (check_call, CallState)):
        values = {s.value for s in enum}
        if a in values and b in values:
            continue
        with pytest.raises(TransitionError):
            check(a, b)


def _raises(check: object, a: StrEnum, b: StrEnum) -> bool:
    try:
        check(a, b)  # type: ignore[operator]
    except TransitionError:
        return True
    return False
