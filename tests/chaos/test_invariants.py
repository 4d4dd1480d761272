"""The chaos invariants are pure checks: sound facts pass, and each kind of breakage is named.

Also: the crash-point table names exactly the boundaries the code has, and the workload is
reproducible from its seed."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from callgate.ops.chaos.boundaries import BOUNDARIES, EFFECTS, boundary_names, reached_by
from callgate.ops.chaos.facts import (
    Facts,
    PeopleFacts,
    RunFacts,
    SentReply,
    latest_conversations,
    people_facts,
    terminal_transitions,
)
from callgate.ops.chaos.invariants import check_all, reservations_per_approved_call, told
from callgate.ops.chaos.report import figures, render
from callgate.ops.chaos.workload import EXPIRE_TTL_S, FOLLOW_UP, plan_runs
from callgate.records import CallRecord, Event, RunRecord, error_result, ok_result
from callgate.standins.scripted.history import Conversation, ToolResult
from callgate.standins.scripted.scenario import load_scenario, select_step
from callgate.states import CallState, RunState

ROOT = Path(__file__).resolve().parents[2]
PLAN = plan_runs(1, 7)[0]
RESERVATION = {"reservation_id": "res-0001", "event_id": "ws-200"}


def call(state: CallState = CallState.SUCCEEDED, **kw: Any) -> CallRecord:
    base: dict[str, Any] = dict(
        run_id=PLAN.run_id, call_id="t1.0", turn=1, index=0, provider_call_id="call_a",
        tool="reserve_seat", effect="write", operation_id="op_1", approval_id="apr_1",
        state=state, result=ok_result(RESERVATION),
    )  # fmt: skip
    base.update(kw)
    return CallRecord(**base)


def facts(
    calls: tuple[CallRecord, ...] | None = None,
    *,
    status: RunState = RunState.COMPLETED,
    received: dict[str, tuple[str, ...]] | None = None,
    outcomes: dict[str, int] | None = None,
    requests: dict[str, int] | None = None,
    created: dict[str, int] | None = None,
    people: PeopleFacts | None = None,
    turns_received: int = 1,
    sent: tuple[SentReply, ...] = (),
    final_text: str | None = None,
) -> Facts:
    calls = (call(),) if calls is None else calls
    run = RunRecord(run_id=PLAN.run_id, api=PLAN.api, model=PLAN.scenario, input="x",
                    status=status, turn=2, final_text=final_text)  # fmt: skip
    got = {c.provider_call_id: (orjson.dumps(told(c.result)).decode(),)
            for c in calls if c.result}  # fmt: skip
    run_facts = RunFacts(
        plan=PLAN, run=run, calls=calls,
        outcomes_recorded={c.call_id: 1 for c in calls} if outcomes is None else outcomes,
        received=got if received is None else received, turns_received=turns_received,
        people=people or PeopleFacts(), sent=sent,
    )  # fmt: skip
    return Facts(
        runs=(run_facts,),
        reserve_requests={"op_1": 1} if requests is None else requests,
        reservations={"op_1": 1} if created is None else created,
        dead_letters=0, model_requests=2, model_drops=0,
    )  # fmt: skip


def broken(found: dict[str, list[str]]) -> set[str]:
    return {name for name, items in found.items() if items}


def test_sound_facts_pass_every_invariant() -> None:
    assert broken(check_all(facts())) == set()
    assert reservations_per_approved_call(facts()) == {"1": 1}


@pytest.mark.parametrize(
    ("made", "name"),
    [
        (facts(status=RunState.EXECUTING), "lost_runs"),
        (facts(status=RunState.PAUSED_APPROVAL), "lost_runs"),
        (facts(requests={"op_1": 2}), "duplicate_writes"),
        (facts(created={"op_1": 1, "op_x": 1}), "unrequested_effects"),
        (facts(created={"op_1": 0}), "write_outcome_mismatches"),
        (facts(outcomes={"t1.0": 2}), "calls_without_one_result"),
        (facts(received={}), "calls_without_one_result"),
        (facts(received={"call_a": ('{"reservation_id": "res-0002"}',)}), "mispaired_results"),
        (
            facts(received={"call_a": (orjson.dumps(RESERVATION).decode(),), "call_b": ("{}",)}),
            "mispaired_results",
        ),
    ],
)
def test_each_breakage_is_caught_by_its_invariant(made: Facts, name: str) -> None:
    assert broken(check_all(made)) == {name}


def test_an_idempotent_write_may_be_sent_twice_but_create_once() -> None:
    hold = call(tool="hold_seat", effect="idempotent_write", approval_id=None)
    assert broken(check_all(facts((hold,), requests={"op_1": 2}))) == set()
    twice = check_all(facts((hold,), created={"op_1": 2}))
    assert broken(twice) == {"duplicate_writes", "write_outcome_mismatches"}


def test_a_denied_write_that_reached_the_service_is_a_mismatch() -> None:
    denied = call(CallState.DENIED, result=error_result("denied_by_approver", "no"))
    assert broken(check_all(facts((denied,), created={}, requests={}))) == set()
    found = check_all(facts((denied,), created={}, requests={"op_1": 1}))
    assert broken(found) == {"write_outcome_mismatches"}


CANCELLED_AT_1 = PeopleFacts(cancel_turn=1, in_flight_at_cancel=("t1.0",))


def test_a_write_in_flight_at_a_cancel_keeps_its_true_outcome() -> None:
    sound = facts(status=RunState.CANCELLED, people=CANCELLED_AT_1, received={},
                  turns_received=0)  # fmt: skip
    assert broken(check_all(sound)) == set()
    for made in (
        replace(sound, reservations={}),  # recorded as succeeded, but nothing was made
        facts((call(CallState.RECONCILING),), status=RunState.CANCELLED, people=CANCELLED_AT_1,
              received={}, turns_received=0),  # never settled
        facts((call(CallState.CANCELLED, result=error_result("cancelled", "c")),),
              status=RunState.CANCELLED, people=CANCELLED_AT_1, received={}, turns_received=0),
    ):  # fmt: skip
        assert "cancel_mismatches" in broken(check_all(made))
    asked_again = facts(status=RunState.CANCELLED, people=CANCELLED_AT_1)  # turn 2 asked
    assert broken(check_all(asked_again)) == {"cancel_mismatches"}
    not_kept = facts(status=RunState.COMPLETED, people=CANCELLED_AT_1)
    assert "cancel_mismatches" in broken(check_all(not_kept))


def test_a_write_left_reconciling_in_an_ended_run_is_a_mismatch() -> None:
    stranded = facts((call(CallState.RECONCILING, result=None),), status=RunState.FAILED,
                     received={}, turns_received=0)  # fmt: skip
    assert broken(check_all(stranded)) == {"write_outcome_mismatches"}


def test_a_cancelled_call_never_reaches_the_service() -> None:
    cancelled = call(CallState.CANCELLED, result=error_result("cancelled", "by alice"))
    never = facts((cancelled,), status=RunState.CANCELLED, requests={}, created={})
    assert broken(check_all(never)) == set()
    sent = facts((cancelled,), status=RunState.CANCELLED, requests={"op_1": 1}, created={})
    assert broken(check_all(sent)) == {"cancelled_calls_executed"}


def test_a_resolved_call_has_the_booking_services_outcome() -> None:
    applied = PeopleFacts(resolutions={"t1.0": ("applied",)})
    assert broken(check_all(facts(people=applied))) == set()
    wrong = check_all(facts(people=applied, created={}))
    assert "resolve_mismatches" in broken(wrong)
    failed = call(CallState.FAILED, result=error_result("not_applied", "no"))
    not_applied = PeopleFacts(resolutions={"t1.0": ("not_applied",)})
    assert broken(check_all(facts((failed,), people=not_applied, created={}))) == set()
    assert broken(check_all(facts((failed,), people=applied, created={}))) == {"resolve_mismatches"}
    left = replace(PLAN, resolve="truth")
    paused = facts(
        (call(CallState.UNRESOLVED, result=None),),
        status=RunState.PAUSED_UNKNOWN_OUTCOME,
        received={},
        turns_received=0,
    )
    assert broken(check_all(paused)) == set()
    mine = replace(paused, runs=(replace(paused.runs[0], plan=left),))
    assert broken(check_all(mine)) == {"resolve_mismatches"}


def test_people_facts_replay_where_each_call_stood_at_the_cancel() -> None:
    kinds = [("call.transition", {"call_id": "t1.0", "to": "executing"}),
             ("call.transition", {"call_id": "t1.1", "to": "succeeded"}),
             ("run.transition", {"to": "cancelled", "turn": 1}),
             ("call.transition", {"call_id": "t1.0", "to": "succeeded"}),
             ("control.refused", {}),
             ("call.resolved", {"call_id": "t1.2", "outcome": "recheck"})]  # fmt: skip
    events = [Event(id=f"{i}-0", t_ms=0, type=t, data=d) for i, (t, d) in enumerate(kinds)]
    assert people_facts(events) == PeopleFacts(1, ("t1.0",), 1, {"t1.2": ("recheck",)})


def test_figures_are_ok_only_when_every_invariant_holds() -> None:
    assert figures(facts(), [], {})["ok"] is True
    bad = figures(facts(requests={"op_1": 2}), [], {})
    assert bad["ok"] is False and bad["duplicate_writes"] == 1
    assert "VIOLATED" in render(bad)


def test_a_stranded_call_doctor_lists_breaks_the_session() -> None:
    line = "stranded call r/t1.0: check_seats executing for 60 s, past the 13 s …"
    fig = figures(replace(facts(), stranded=(line,)), [], {})
    assert broken(check_all(replace(facts(), stranded=(line,)))) == {"stranded_calls"}
    assert fig["ok"] is False and fig["stranded_calls"] == 1
    assert f"invariant   stranded_calls = 1 (VIOLATED: {line})" in render(fig)
    assert "invariant   stranded_calls = 0 (ok)" in render(figures(facts(), [], {}))


def test_the_model_log_is_matched_to_runs_by_the_marker_in_their_input() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": f"{PLAN.marker} hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "42"},
    ]}  # fmt: skip
    older = {**body, "messages": body["messages"][:1]}
    log = [{"path": "/v1/chat/completions", "body": b} for b in (older, body)]
    conv = latest_conversations(log)[PLAN.run_id]
    assert conv.assistant_turns == 1 and [r.content for r in conv.results] == ["42"]


def test_terminal_transitions_count_events_into_a_terminal_state() -> None:
    events = [
        Event(id=f"{i}-0", t_ms=0, type="call.transition", data={"call_id": "t1.0", "to": to})
        for i, to in enumerate(("executing", "succeeded"))
    ]
    assert terminal_transitions(events) == {"t1.0": 1}


def test_the_boundary_table_names_every_crash_point_in_the_code() -> None:
    literal = re.compile(r'crash_point\("([a-z_.]+)"\)')
    in_code = {
        name
        for path in [*ROOT.glob("services/**/*.py"), *ROOT.glob("shared/**/*.py")]
        for name in literal.findall(path.read_text())
    }
    generic = {f"{w}.before_ack" for w in ("model_turn", "validator", "executor", "reconciler")}
    assert set(boundary_names()) == in_code | generic
    assert all(reached_by(e) for e in EFFECTS)
    assert {b.name for b in BOUNDARIES if b.effects == {"write"}} >= {"validator.mid_approval"}


def test_the_workload_is_reproducible_from_its_seed() -> None:
    assert plan_runs(30, 5) == plan_runs(30, 5)
    assert plan_runs(30, 5) != plan_runs(30, 6)
    kinds = {p.kind for p in plan_runs(30, 5)}
    assert kinds == {"travel", "workshop", "hold"}
    assert replace(PLAN, decision="deny").spec()["run_id"] == PLAN.run_id
    decisions = {p.decision for p in plan_runs(200, 5)}
    assert decisions == {"approve", "deny", "expire"}
    expiring = replace(PLAN, decision="expire").spec()
    approving = replace(PLAN, decision="approve").spec()
    assert expiring["approval_ttl_s"] == EXPIRE_TTL_S and "approval_ttl_s" not in approving


def test_people_act_on_a_seeded_share_without_changing_the_mix() -> None:
    plans = plan_runs(200, 1)
    assert {p.cancel for p in plans} == {"no", "at", "in_flight"}
    assert {p.resolve for p in plans} == {"no", "truth", "recheck"}
    bare = [replace(p, cancel="no", cancel_after_s=0.0, resolve="no", write_delay_s=0.0,
                    lost_reserve="commit_then_drop") for p in plans]  # fmt: skip
    assert [(p.kind, p.decision) for p in bare] == [(p.kind, p.decision) for p in plans]
    for p in plans:
        faults = p.booking_faults()
        if p.cancel == "in_flight":
            assert p.kind != "travel" and faults is not None and faults["reserve"]["count"] == 1
        elif p.resolve != "no":
            assert (p.kind, p.decision) == ("workshop", "approve")
            assert faults is not None and faults["lookup"] == {"mode": "lookup_unknown"}
        else:
            assert faults is None


ADMITTED = SentReply("reply-1", "reject", "admitted")
REPLIED = PeopleFacts(replies={"reply-1": ("completed",)}, reply_turn=3)


def replied(**kw: Any) -> Facts:
    """A run that took reply-1 and answered it (the follow-up request had two assistant turns)."""
    base: dict[str, Any] = dict(
        people=REPLIED,
        sent=(ADMITTED,),
        turns_received=2,
        final_text=f"You asked: {PLAN.reply_text} Nothing else changed.",
    )
    base.update(kw)
    return facts(**base)


@pytest.mark.parametrize(
    ("made", "name"),
    [
        (replied(sent=()), "replies_not_applied_once"),
        (
            replied(people=replace(REPLIED, replies={"reply-1": ("completed", "completed")})),
            "replies_not_applied_once",
        ),
        (replied(people=PeopleFacts()), "replies_not_applied_once"),
        (
            facts(
                people=REPLIED,
                sent=(SentReply("reply-1", "reject", "refused"),),
                turns_received=2,
                final_text=FOLLOW_UP,
            ),
            "replies_not_applied_once",
        ),
        (
            replied(people=replace(REPLIED, replies={"reply-1": ("cancelled",)})),
            "replies_to_unfinished_runs",
        ),
        (replied(status=RunState.AWAITING_MODEL), "replied_runs_unsettled"),
        (replied(turns_received=1), "replied_runs_unsettled"),
        (replied(final_text="Reservation: ok"), "replied_runs_unsettled"),
    ],
)
def test_each_reply_breakage_is_caught_by_its_invariant(made: Facts, name: str) -> None:
    found = broken(check_all(made))
    assert name in found and found - {name} <= {"lost_runs"}


def test_a_sound_reply_passes_and_a_refused_or_waiting_one_changes_nothing() -> None:
    assert broken(check_all(replied())) == set()
    for verdict in ("refused", "none"):
        refused = facts(status=RunState.CANCELLED, sent=(SentReply("r", "reject", verdict),))
        assert broken(check_all(refused)) == set()
    cancelled_after = replied(status=RunState.CANCELLED, final_text=None, turns_received=0)
    assert broken(check_all(cancelled_after)) == set(), "a cancel after the reply is an end"
    figs = figures(replied(), [], {"people": {}})
    assert figs["ok"] is True


def test_reply_facts_replay_the_status_before_each_reply() -> None:
    kinds = [("run.transition", {"to": "completed", "turn": 2}),
             ("run.transition", {"to": "awaiting_model", "turn": 2}),
             ("run.reply", {"reply_id": "reply-1", "turn": 3}),
             ("run.transition", {"to": "cancelled", "turn": 3})]  # fmt: skip
    events = [Event(id=f"{i}-0", t_ms=0, type=t, data=d) for i, (t, d) in enumerate(kinds)]
    found = people_facts(events)
    assert found.replies == {"reply-1": ("completed",)} and found.reply_turn == 3
    assert found.cancel_turn == 3


def test_replies_are_planned_on_a_seeded_share_without_changing_the_rest() -> None:
    plans = plan_runs(200, 1)
    after = sum(p.reply == "after" for p in plans)
    busy = [p for p in plans if p.reply == "busy"]
    assert 10 <= after <= 35 and 3 <= len(busy) <= 20
    assert all(0 <= p.reply_after_s <= 1.0 and p.reply_policy == "enqueue" for p in busy)
    bare = [replace(p, reply="no", reply_after_s=0.0) for p in plans]
    assert [(p.kind, p.decision, p.cancel, p.resolve) for p in bare] == [
        (p.kind, p.decision, p.cancel, p.resolve) for p in plans
    ]
    assert PLAN.marker in PLAN.reply_text and FOLLOW_UP in PLAN.reply_text


@pytest.mark.parametrize("name", ["chaos-travel", "chaos-workshop", "chaos-hold", "chaos-reserve"])
def test_every_chaos_scenario_answers_a_follow_up_turn(name: str) -> None:
    """The request for a follow-up turn (two assistant turns, every earlier result) picks the
    follow-up step, never "no step matches" nor an earlier step's answer."""
    scenario = load_scenario(name, [ROOT / "shared" / "standins" / "scenarios"])
    assert scenario is not None
    tools = {c.name for s in scenario.steps for c in s.tool_calls}
    results = tuple(ToolResult(call_id=f"call_{t}", name=t, content="{}") for t in tools)
    conv = Conversation(assistant_turns=2, results=results, last_user_text=PLAN.reply_text)
    step = select_step(scenario, conv)
    assert step is not None and scenario.steps[step].name == "follow-up"
