"""`HistoryCarry`: bounded hand-overs between a turn's steps; a failed step drops only its own."""

from __future__ import annotations

from callgate.envelopes import CallResult
from callgate.loop.carry import HistoryCarry, Started
from callgate.records import CallRecord, RunRecord, ok_result
from callgate.states import CallState, RunState

RUN = RunRecord(
    run_id="r", status=RunState.VALIDATING, api="openai-chat", model="m", input="hi", turn=1
)


def _call(index: int) -> CallRecord:
    call_id, provider_id = f"t1.{index}", f"c{index}"
    return CallRecord(
        run_id="r", call_id=call_id, turn=1, index=index, provider_call_id=provider_id, tool="t"
    )


def _started(*items: bytes, calls: int = 1) -> Started:
    return Started(RUN, tuple(_call(i) for i in range(calls)), list(items))


def _result(call_id: str, state: str = "succeeded", payload: object = 1) -> CallResult:
    return CallResult(run_id="r", turn=1, call_id=call_id, state=state, result=ok_result(payload))


def test_an_entry_is_read_until_taken_once() -> None:
    carry = HistoryCarry(limit=10)
    entry = carry.started.put(("r", 1), _started(b"a"))
    assert carry.started.get(("r", 1)) is entry  # each result of the turn may look
    assert carry.started.take(("r", 1)) is entry  # the step that ends the turn takes it
    assert carry.started.take(("r", 1)) is None


def test_a_failed_step_drops_its_own_entry_not_a_newer_one() -> None:
    carry = HistoryCarry(limit=10)
    mine = carry.started.put(("r", 1), _started(b"a"))
    newer = carry.started.put(("r", 1), _started(b"a"))  # a racing step of the same turn
    carry.started.drop(("r", 1), mine)
    assert carry.started.take(("r", 1)) is newer
    carry.started.put(("r", 2), mine)
    carry.started.drop(("r", 2), mine)
    assert carry.started.take(("r", 2)) is None


def test_the_oldest_entries_go_beyond_the_limit() -> None:
    carry = HistoryCarry(limit=2)
    for turn in (1, 2, 3):
        carry.started.put(("r", turn), _started(b"%d" % turn))
    assert carry.started.take(("r", 1)) is None
    assert carry.started.take(("r", 3)) == _started(b"3")


def test_a_turn_is_settled_once_every_call_came_with_its_outcome() -> None:
    started = _started(calls=2)
    started.note(_result("t1.1", payload="b"))
    assert started.settled() is None  # t1.0 is still out
    started.note(_result("t1.0", state="failed", payload="a"))
    settled = started.settled()
    assert settled is not None and settled.carried
    assert settled.run.status == RunState.EXECUTING  # every call is terminal: it executes
    assert [(c.call_id, c.state, c.result) for c in settled.calls] == [
        ("t1.0", CallState.FAILED, ok_result("a")),
        ("t1.1", CallState.SUCCEEDED, ok_result("b")),
    ]


def test_results_without_their_outcome_or_of_other_calls_are_not_kept() -> None:
    started = _started(calls=1)
    started.note(CallResult(run_id="r", turn=1, call_id="t1.0", state="rejected"))  # no result
    started.note(_result("t9.0"))  # not a call of this turn
    started.note(_result("t1.0", state="no-such-state"))
    assert started.settled() is None
    assert started.results == {}
