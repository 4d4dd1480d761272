"""The whole conformance matrix, end to end, once: 14 cases × 3 protocols against real worker
processes, real Redis, the demo services and the scripted model server through the official
SDKs.  Then each kind of check is shown to bite: one thing of a real, passing observation is
broken the way a faulty runtime would break it, and the cell must fail saying what differed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from callgate.ops.conformance.catalogue import APIS, CASES, PAUSE
from callgate.ops.conformance.checker import Cell, check
from callgate.ops.conformance.observation import Observation
from callgate.ops.conformance.runner import Outcome, Plan, run_matrix

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
MATRIX_BUDGET_S = 180.0


@pytest.fixture(scope="module")
def matrix(store_url: str) -> Iterator[dict[tuple[str, str], Outcome]]:
    started = time.monotonic()
    outcomes = run_matrix(Plan(CASES), redis_url=store_url)
    elapsed_s = time.monotonic() - started
    assert elapsed_s < MATRIX_BUDGET_S, f"the matrix took {elapsed_s:.0f}s"
    yield {(o.case.id, o.cell.api): o for o in outcomes}


def _outcome(matrix: dict[tuple[str, str], Outcome], case: str, api: str) -> Outcome:
    outcome = matrix[(case, api)]
    assert outcome.cell.passed, outcome.cell.detail  # a break must start from a passing cell
    return outcome


def _broken(outcome: Outcome, **changes: Any) -> Cell:
    seen = dataclasses.replace(outcome.observation, **changes)
    return check(outcome.case, outcome.cell.api, seen)


def _executed(outcome: Outcome, tool: str, times: int) -> Cell:
    """The cell had the service counted ``times`` executions of ``tool``."""
    return _broken(outcome, executions={**outcome.observation.executions, tool: times})


def test_the_matrix_has_every_case_on_every_protocol(
    matrix: dict[tuple[str, str], Outcome],
) -> None:
    assert len(matrix) == 42
    assert set(matrix) == {(case.id, api) for case in CASES for api in APIS}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", [c.id for c in CASES])
def test_cell(matrix: dict[tuple[str, str], Outcome], case: str, api: str) -> None:
    cell = matrix[(case, api)].cell
    assert cell.passed, cell.detail
    assert (cell.expected_state, cell.pairing_ok, cell.detail) == (cell.actual_state, True, "")


# -- each kind of check, broken on purpose -------------------------------------------------


def _swap_results(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request body a runtime pairing results by position (in finishing order) would
    send: the two results' contents change places, the call ids stay."""
    if api == "openai-responses":
        items = [dict(i) for i in body["input"]]
        outs = [i for i in items if i.get("type") == "function_call_output"]
        outs[0]["output"], outs[1]["output"] = outs[1]["output"], outs[0]["output"]
        return {**body, "input": items}
    messages = [dict(m) for m in body["messages"]]
    if api == "openai-chat":
        tools = [m for m in messages if m["role"] == "tool"]
        tools[0]["content"], tools[1]["content"] = tools[1]["content"], tools[0]["content"]
        return {**body, "messages": messages}
    carrier = next(m for m in messages if m["role"] == "user" and isinstance(m["content"], list))
    blocks = [dict(b) for b in carrier["content"]]
    blocks[0]["content"], blocks[1]["content"] = blocks[1]["content"], blocks[0]["content"]
    carrier["content"] = blocks
    return {**body, "messages": messages}


@pytest.mark.parametrize("api", APIS)
def test_pairing_by_position_is_caught(matrix: dict[tuple[str, str], Outcome], api: str) -> None:
    outcome = _outcome(matrix, "out-of-order", api)
    assert outcome.observation.last_request is not None
    cell = _broken(outcome, last_request=_swap_results(api, dict(outcome.observation.last_request)))
    assert not cell.passed and not cell.pairing_ok
    assert "get_train_status" in cell.detail and "under its call id" in cell.detail


def test_a_result_missing_from_the_history_is_caught(
    matrix: dict[tuple[str, str], Outcome],
) -> None:
    outcome = _outcome(matrix, "tool-error", "openai-chat")
    body = dict(outcome.observation.last_request or {})
    body["messages"] = [m for m in body["messages"] if m["role"] != "tool"]
    cell = _broken(outcome, last_request=body)
    assert not cell.pairing_ok and "no result was sent under its call id" in cell.detail


def test_an_extra_execution_is_caught(matrix: dict[tuple[str, str], Outcome]) -> None:
    outcome = _outcome(matrix, "one-call", "anthropic-messages")
    cell = _executed(outcome, "get_train_status", 2)
    assert not cell.passed
    assert "executions of get_train_status: expected 1, the service counted 2" in cell.detail


@pytest.mark.parametrize("api", APIS)
def test_executing_a_truncated_call_is_caught(
    matrix: dict[tuple[str, str], Outcome], api: str
) -> None:
    outcome = _outcome(matrix, "truncated", api)
    cell = _executed(outcome, "get_train_status", 1)
    assert not cell.passed
    assert "executions of get_train_status: expected 0, the service counted 1" in cell.detail


@pytest.mark.parametrize("case", ["connection-lost", "crash-recovery"])
def test_replaying_an_unknown_write_is_caught(
    matrix: dict[tuple[str, str], Outcome], case: str
) -> None:
    outcome = _outcome(matrix, case, "openai-responses")
    # A replay with the same operation id: the service deduplicates, so still one
    # reservation — but the write was sent twice, and the count says so.
    cell = _executed(outcome, "reserve_seat", 2)
    assert not cell.passed
    assert "executions of reserve_seat: expected 1, the service counted 2" in cell.detail
    replayed_as_new = _broken(outcome, effects=2)  # a replay under a new operation id
    assert "expected 1 reservation(s), the booking service made 2" in replayed_as_new.detail


def test_a_wrong_final_state_is_caught(matrix: dict[tuple[str, str], Outcome]) -> None:
    outcome = _outcome(matrix, "approval", "openai-chat")
    cell = _broken(outcome, states=(PAUSE, "failed"), reason="dead letter")
    assert not cell.passed and cell.actual_state == f"{PAUSE} → failed"
    assert "state: expected paused_approval → completed, got" in cell.detail
    assert "(dead letter)" in cell.detail


def test_an_external_effect_where_none_is_allowed_is_caught(
    matrix: dict[tuple[str, str], Outcome],
) -> None:
    outcome = _outcome(matrix, "server-rejection", "anthropic-messages")
    cell = _broken(outcome, effects=1)
    assert not cell.passed and cell.external_effect
    assert "expected 0 reservation(s), the booking service made 1" in cell.detail


def test_executing_before_approval_is_caught(matrix: dict[tuple[str, str], Outcome]) -> None:
    outcome = _outcome(matrix, "approval", "openai-responses")
    assert outcome.observation.executions_at_pause == {
        "get_train_status": 0, "get_weather": 0, "reserve_seat": 0,
    }  # fmt: skip
    cell = _broken(outcome, executions_at_pause={"reserve_seat": 1})
    assert not cell.passed and "reserve_seat executed 1× before it was approved" in cell.detail


def test_calls_finishing_in_request_order_do_not_pass_for_out_of_order(
    matrix: dict[tuple[str, str], Outcome],
) -> None:
    outcome = _outcome(matrix, "out-of-order", "openai-chat")
    in_order = ("get_train_status", "get_weather")
    assert outcome.observation.finish_order == in_order[::-1]
    cell = _broken(outcome, finish_order=in_order)
    assert not cell.passed and "expected get_weather then get_train_status" in cell.detail


def test_a_lost_answer_that_was_never_lost_is_caught(
    matrix: dict[tuple[str, str], Outcome],
) -> None:
    """If the fault did not fire, the write succeeds directly: the path gives it away."""
    outcome = _outcome(matrix, "connection-lost", "anthropic-messages")
    [call] = outcome.observation.calls
    direct = dataclasses.replace(
        call, path=("requested", "needs_approval", "approved", "executing", "succeeded"), reasons=()
    )
    cell = _broken(outcome, calls=(direct,))
    assert not cell.passed
    assert "expected the path requested → needs_approval → approved → executing → unknown" in (
        cell.detail
    )
    assert "no transition gives the reason 'reconciled: applied'" in cell.detail


def test_a_recovery_without_a_crash_is_caught(matrix: dict[tuple[str, str], Outcome]) -> None:
    """A write that timed out on its own also ends reconciled; only the crash evidence differs."""
    outcome = _outcome(matrix, "crash-recovery", "openai-chat")
    seen: Observation = outcome.observation
    assert seen.crash is not None and "SIGKILL executor" in seen.crash
    [call] = seen.calls
    timed_out = dataclasses.replace(call, reasons=("reconciled: applied",))
    cell = _broken(outcome, crash=None, calls=(timed_out,))
    assert not cell.passed
    assert "no executor was killed" in cell.detail
    assert "executor died while the write was in flight" in cell.detail


@pytest.mark.parametrize("api", APIS)
def test_a_resolution_not_honoured_is_caught(
    matrix: dict[tuple[str, str], Outcome], api: str
) -> None:
    """carol's confirmed result must be the call's result and what the model got; nothing may be
    replayed once she has said the write happened."""
    outcome = _outcome(matrix, "resolved-by-person", api)
    [call] = outcome.observation.calls
    assert call.result == {"status": "ok", "payload": {"reservation_id": "r-confirmed-by-carol"}}
    invented = dataclasses.replace(call, result={"status": "ok", "payload": {"id": "r-9"}})
    cell = _broken(outcome, calls=(invented,))
    assert not cell.passed and not cell.pairing_ok
    assert 'not the {"reservation_id":"r-confirmed-by-carol"} carol confirmed' in cell.detail
    replayed = _executed(outcome, "reserve_seat", 2)
    assert "executions of reserve_seat: expected 1, the service counted 2" in replayed.detail
    unasked = _broken(outcome, states=(PAUSE, "completed"), acted=None)
    assert "carol never got to resolve" in unasked.detail


@pytest.mark.parametrize("api", APIS)
def test_a_cancel_that_loses_the_write_or_asks_the_model_again_is_caught(
    matrix: dict[tuple[str, str], Outcome], api: str
) -> None:
    outcome = _outcome(matrix, "cancel-in-flight", api)
    seen = outcome.observation
    assert seen.model_requests == seen.model_requests_at_action == 1
    next_turn = _broken(outcome, model_requests=seen.model_requests + 1)
    assert not next_turn.passed
    assert "the model received 1 request(s) after the run was cancelled" in next_turn.detail
    [call] = seen.calls
    assumed = dataclasses.replace(call, state="cancelled", path=(*call.path[:-1], "cancelled"))
    cell = _broken(outcome, calls=(assumed,))
    assert not cell.passed and "expected succeeded, got cancelled" in cell.detail
