"""The checker, the pairing reader and the report as pure functions: no Redis, no processes."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from callgate.ops.conformance.catalogue import CASES, Case, select
from callgate.ops.conformance.checker import check
from callgate.ops.conformance.observation import Observation, ObservedCall
from callgate.ops.conformance.pairing import pairing_problems, result_pairs, told
from callgate.ops.conformance.report import exit_code, render, to_json

CASE = {case.id: case for case in CASES}
READ_PATH = ("requested", "allowed", "executing", "succeeded")
TRAIN = {"train_number": "G1234", "status": "on_time"}
WEATHER = {"city": "Hangzhou", "condition": "light rain"}


def ok(payload: Any) -> dict[str, Any]:
    return {"status": "ok", "payload": payload}


def call(tool: str, pid: str, result: dict[str, Any], path: tuple[str, ...] = READ_PATH,
         state: str = "succeeded") -> ObservedCall:  # fmt: skip
    return ObservedCall(tool, pid, 1, state, result, path)


def chat_body(*results: tuple[str, Any]) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": pid} for pid, _ in results]},
            *({"role": "tool", "tool_call_id": pid, "content": orjson.dumps(content).decode()}
              for pid, content in results),
        ],
    }  # fmt: skip


def parallel_seen(**changes: Any) -> Observation:
    """What a correct run of the out-of-order case looks like on openai-chat."""
    fields: dict[str, Any] = {
        "run_id": "r",
        "states": ("completed",),
        "turns": 2,
        "executions": {"get_train_status": 1, "get_weather": 1, "reserve_seat": 0},
        "calls": (call("get_train_status", "c1", ok(TRAIN)),
                  call("get_weather", "c2", ok(WEATHER))),
        "last_request": chat_body(("c1", TRAIN), ("c2", WEATHER)),
        "finish_order": ("get_weather", "get_train_status"),
    }  # fmt: skip
    return Observation(**{**fields, **changes})


def test_a_correct_observation_passes_and_says_nothing() -> None:
    cell = check(CASE["out-of-order"], "openai-chat", parallel_seen())
    assert cell.passed and cell.pairing_ok and not cell.external_effect
    assert cell.detail == "" and cell.actual_state == cell.expected_state == "completed"
    assert cell.executions == {"get_train_status": 1, "get_weather": 1}


def test_results_under_each_others_call_ids_fail_pairing() -> None:
    swapped = chat_body(("c1", WEATHER), ("c2", TRAIN))
    cell = check(CASE["out-of-order"], "openai-chat", parallel_seen(last_request=swapped))
    assert not cell.passed and not cell.pairing_ok
    assert cell.problems == (
        'pairing: get_train_status (c1): the model got {"city":"Hangzhou","condition":"light '
        'rain"} under its call id, but its result is {"train_number":"G1234","status":"on_time"}',
        'pairing: get_weather (c2): the model got {"train_number":"G1234","status":"on_time"} '
        'under its call id, but its result is {"city":"Hangzhou","condition":"light rain"}',
    )


def test_every_other_kind_of_difference_is_named() -> None:
    seen = parallel_seen(
        states=("failed",),
        reason="boom",
        executions={"get_train_status": 2, "get_weather": 1},
        effects=1,
        finish_order=("get_train_status", "get_weather"),
        last_request=None,
        error="gave up after 1s",
    )
    problems = check(CASE["out-of-order"], "openai-chat", seen).problems
    assert problems == (
        "runner: gave up after 1s",
        "state: expected completed, got failed (boom)",
        "executions of get_train_status: expected 1, the service counted 2",
        "external effects: expected 0 reservation(s), the booking service made 1",
        "pairing: the model server logged no request for this run",
        "finish order: expected get_weather then get_train_status, got get_train_status then "
        "get_weather",
    )


def test_call_outcomes_paths_and_reasons_are_checked() -> None:
    case = CASE["crash-recovery"]
    path = ("requested", "needs_approval", "approved", "executing", "failed")
    failed = call("reserve_seat", "c1", {"status": "error", "error": {"code": "not_applied"}},
                  path, "failed")  # fmt: skip
    seen = Observation(
        "r", case.states, turns=2, executions={"reserve_seat": 1},
        executions_at_pause={"reserve_seat": 0}, effects=1, calls=(failed,),
        last_request=chat_body(("c1", {"error": {"code": "not_applied"}})), crash="killed",
    )  # fmt: skip
    problems = check(case, "openai-chat", seen).problems
    assert problems == (
        "call 1 (reserve_seat): expected succeeded, got failed (not_applied)",
        "call 1 (reserve_seat): expected the path requested → needs_approval → approved → "
        "executing → unknown → reconciling → succeeded, got requested → needs_approval → "
        "approved → executing → failed",
        "call 1 (reserve_seat): no transition gives the reason "
        "'executor died while the write was in flight'",
    )
    other_calls = check(case, "openai-chat", Observation("r", case.states, calls=()))
    assert "calls: expected [reserve_seat], the run has []" in other_calls.detail


def test_calls_of_the_last_turn_are_not_due_back_to_the_model() -> None:
    """A run paused on its calls has not sent their results yet; that is no pairing fault."""
    case = Case("c", "c", "s", "t", "i", ("paused_approval",))
    pending = call("reserve_seat", "c1", {"status": "ok", "payload": {}})
    seen = Observation("r", ("paused_approval",), turns=1, calls=(pending,),
                       last_request=chat_body(), executions_at_pause={})  # fmt: skip
    assert check(case, "openai-chat", seen).pairing_ok


def test_a_persons_action_must_be_taken_and_do_what_it_says() -> None:
    """A cancel the runner never got to post, or one the model heard past; a resolution whose
    confirmed result is not what the call holds."""
    cancel = CASE["cancel-in-flight"]
    seen = Observation("r", cancel.states, model_requests=2, model_requests_at_action=1)
    problems = check(cancel, "openai-chat", seen).problems
    assert "operator never got to cancel (at write in flight): the case did not exercise it" in (
        problems
    )
    late = check(cancel, "openai-chat", dataclasses.replace(seen, acted="operator: cancelled r"))
    assert "the model received 1 request(s) after the run was cancelled" in late.problems
    resolved = CASE["resolved-by-person"]
    path = resolved.calls[0].path
    other = call("reserve_seat", "c1", ok({"reservation_id": "r-other"}), path)
    seen = Observation("r", resolved.states, calls=(other,), acted="carol: resolved t1.0")
    assert check(resolved, "openai-chat", seen).problems[-1] == (
        'call 1 (reserve_seat): its result is {"reservation_id":"r-other"}, '
        'not the {"reservation_id":"r-confirmed-by-carol"} carol confirmed'
    )


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("openai-responses", {"input": [
            {"type": "function_call", "call_id": "a"},
            {"type": "function_call_output", "call_id": "a", "output": "1"}]}),
        ("openai-chat", {"messages": [{"role": "tool", "tool_call_id": "a", "content": "1"}]}),
        ("anthropic-messages", {"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "1", "is_error": False}]}]}),
        ("anthropic-messages", {"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a",
             "content": [{"type": "text", "text": "1"}]}]}]}),
    ],
)  # fmt: skip
def test_result_pairs_reads_each_wire_format(api: str, body: dict[str, Any]) -> None:
    assert result_pairs(api, body) == {"a": "1"}


def test_pairing_names_unknown_and_missing_call_ids() -> None:
    calls = [call("get_weather", "c2", ok(WEATHER))]
    problems = pairing_problems(calls, {"zz": "{}"})
    assert problems == [
        "a result was sent under zz, which no call of the run has",
        "get_weather (c2): no result was sent under its call id",
    ]
    error = {"status": "error", "error": {"code": "not_found", "message": "no"}}
    assert told(error) == {"error": {"code": "not_found", "message": "no"}}
    assert told(ok([1])) == [1]


def test_select_and_unknown_cases() -> None:
    assert [c.id for c in select(("refusal", "one-call"))] == ["one-call", "refusal"]
    assert len(select()) == 14
    with pytest.raises(ValueError, match="unknown case nope"):
        select(("nope",))


def test_report_json_has_exactly_the_promised_fields_and_exit_codes() -> None:
    good = check(CASE["out-of-order"], "openai-chat", parallel_seen())
    bad = check(CASE["out-of-order"], "anthropic-messages", parallel_seen(states=("failed",)))
    assert list(to_json([good])["cells"][0]) == [
        "case", "api", "passed", "expected_state", "actual_state", "executions",
        "pairing_ok", "external_effect", "detail",
    ]  # fmt: skip
    assert (exit_code([good]), exit_code([good, bad]), exit_code([])) == (0, 1, 1)


def test_render_shows_the_matrix_and_each_difference() -> None:
    good = check(CASE["out-of-order"], "openai-chat", parallel_seen())
    bad = check(CASE["out-of-order"], "anthropic-messages", parallel_seen(states=("failed",)))
    text = render([CASE["out-of-order"]], ["openai-chat", "anthropic-messages"], [good, bad], 3)
    lines = text.splitlines()
    assert lines[0].split() == ["case", "openai-chat", "anthropic-messages"]
    assert lines[1].split()[-2:] == ["✓", "✗"]
    assert "1/2 cells passed in 3s" in text
    assert "✗ out-of-order × anthropic-messages: expected completed, got failed" in text
    assert "- state: expected completed, got failed" in text
