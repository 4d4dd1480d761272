"""Which event-log entries become webhook events, and which counters they move (pure)."""

from __future__ import annotations

from typing import Any

from callgate.records import Event
from callgate.webhooks.events import Tally, webhook_event

TOOLS = {"c1": "reserve_seat"}


def ev(type: str, t_ms: int = 1_000, id: str = "1-0", **data: Any) -> Event:
    return Event(id=id, t_ms=t_ms, type=type, data=data)


def test_run_pauses_and_ends_are_events() -> None:
    paused = webhook_event("r1", ev("run.transition", to="paused_approval", reason="ok"), TOOLS)
    assert paused is not None and paused.type == "run.paused"
    assert paused.data == {"status": "paused_approval", "reason": "ok"}
    assert paused.id == "r1/1-0"
    for end in ("completed", "failed", "refused", "handed_off", "cancelled"):
        found = webhook_event("r1", ev("run.transition", to=end), TOOLS)
        assert found is not None and found.type == "run.finished", end


def test_other_run_transitions_are_not_events() -> None:
    for to in ("awaiting_model", "validating", "executing"):
        assert webhook_event("r1", ev("run.transition", to=to), TOOLS) is None


def test_an_approval_request_carries_its_redacted_details() -> None:
    data = {
        "approval_id": "a1",
        "call_id": "c1",
        "tool": "reserve_seat",
        "arguments": {"event_id": "ws-1"},
        "approver_role": "events-lead",
    }
    found = webhook_event("r1", ev("approval.requested", **data), TOOLS)
    assert found is not None and found.type == "approval.requested" and found.data == data


def test_an_unresolved_call_is_an_unknown_outcome_naming_its_tool() -> None:
    entry = ev("call.transition", call_id="c1", to="unresolved", reason="still unknown")
    found = webhook_event("r1", entry, TOOLS)
    assert found is not None and found.type == "outcome.unknown"
    assert found.data == {"call_id": "c1", "tool": "reserve_seat", "reason": "still unknown"}
    assert webhook_event("r1", ev("call.transition", call_id="c1", to="unknown"), TOOLS) is None


def test_the_body_is_stable_json() -> None:
    found = webhook_event("r1", ev("run.transition", to="completed"), TOOLS)
    assert found is not None
    assert found.body() == found.body()
    assert found.body().startswith(b'{"id":"r1/1-0","type":"run.finished"')


def test_tally_counts_calls_by_tool_and_outcome_and_reconciliations() -> None:
    tally = Tally()
    for entry in (
        ev("call.transition", call_id="c1", **{"from": ["executing"]}, to="unknown"),
        ev("call.transition", call_id="c1", **{"from": ["unknown"]}, to="reconciling"),
        ev("call.transition", call_id="c1", **{"from": ["reconciling"]}, to="succeeded"),
        ev("call.transition", call_id="c2", **{"from": ["requested"]}, to="rejected"),
        ev("call.resolved", call_id="c1", outcome="not_applied"),
        ev("run.transition", to="completed"),
    ):
        tally.add(entry, TOOLS, {})
    assert tally.counts == {
        "calls|reserve_seat|unknown": 1,
        "calls|reserve_seat|succeeded": 1,
        "calls|unknown|rejected": 1,
        "reconciled|reconciler|applied": 1,
        "reconciled|person|not_applied": 1,
        "finished|completed": 1,
    }


def test_tally_measures_the_approval_wait_across_passes() -> None:
    first = Tally()
    first.add(ev("approval.requested", t_ms=10_000, approval_id="a1"), TOOLS, {})
    assert first.asked == {"a1": 10_000}
    second = Tally()
    second.add(ev("approval.approved", t_ms=50_000, approval_id="a1"), TOOLS, first_asked(first))
    assert second.asked == {"a1": None}, "decided: forgotten"
    assert second.counts["wait|approved|+Inf"] == 1
    assert second.counts["wait|approved|sum_ms"] == 40_000
    assert second.counts["wait|approved|60"] == 1 and second.counts["wait|approved|30"] == 0


def test_a_wait_whose_request_was_never_seen_is_not_guessed() -> None:
    tally = Tally()
    tally.add(ev("approval.expired", approval_id="a9"), TOOLS, {})
    assert not tally.counts


def first_asked(tally: Tally) -> dict[str, int]:
    return {k: v for k, v in tally.asked.items() if v is not None}


def test_an_entry_of_an_unexpected_shape_is_neither_an_event_nor_a_crash() -> None:
    """The follower must not wedge on one odd entry: every later event of the run waits on it."""
    for data in ({"to": ["completed"]}, {"to": {"x": 1}}, {}, {"call_id": None, "to": 3}):
        for type in ("run.transition", "call.transition"):
            entry = ev(type, **data)
            assert webhook_event("r1", entry, TOOLS) is None
            Tally().add(entry, TOOLS, {})
