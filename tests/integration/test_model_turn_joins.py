"""model_turn's join of a turn it started, on the real ledger: results that come with their
outcome are appended without reading the calls back, and only if the ledger holds exactly
that outcome — a result message that says otherwise never reaches the model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from callgate.config import Settings
from callgate.envelopes import CallResult, TurnRequest, decode, encode, new_id
from callgate.errors import EnvelopeError
from callgate.ledger.tx import Tx
from callgate.records import ErrorResult, OkResult, RunRecord, error_result, ok_result
from callgate.services.model_turn import ModelTurn
from callgate.states import CallState, RunState
from callgate.streams.service import build_runtime
from callgate.streams.worker import Delivery
from tests.ledger_spy import count_run_and_calls

RESULT = ok_result({"key": "k1", "value": "recorded"})


@pytest.fixture
async def worker(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ModelTurn]:
    # The adapter builds its SDK client, never used to send: the model runs in process.
    monkeypatch.setenv("OPENAI_API_KEY", "in-process")
    in_process = settings.model_copy(
        update={"adapter_factory": "callgate.ops.bench.provider:in_process"}
    )
    runtime = build_runtime("model_turn", in_process)
    try:
        yield ModelTurn(runtime)
    finally:
        await runtime.close()


def _delivery() -> Delivery:
    return Delivery(stream="test", message_id="1-0", delivery_count=1)


async def _turn_with_its_call_run(worker: ModelTurn) -> str:
    """Turn 1 asked for one bench_read, which the validator allowed and an executor ran."""
    ledger = worker.ledger
    run = RunRecord(
        run_id=f"run-join-{new_id()}",
        status=RunState.AWAITING_MODEL,
        api="openai-chat",
        model="bench-three-turns",
        input="read k1",
        turn=1,
        identity={"user": "bench"},
        allowed_tools=["bench_read"],
    )
    assert (await ledger.apply(ledger.start_run(run, [{"role": "user", "content": "read k1"}]))).ok
    await worker.handle(TurnRequest(run_id=run.run_id, turn=1), _delivery())
    decided = Tx()  # guards see the state before the step: one step per hop
    ledger.run_transition(decided, run.run_id, [RunState.VALIDATING], RunState.EXECUTING)
    ledger.call_transition(decided, run.run_id, "t1.0", [CallState.REQUESTED], CallState.ALLOWED)
    assert (await ledger.apply(decided)).ok
    taken = ledger.call_transition(
        Tx(), run.run_id, "t1.0", [CallState.ALLOWED], CallState.EXECUTING, {"attempts": 1}
    )
    assert (await ledger.apply(taken)).ok
    tx = ledger.call_transition(
        Tx(), run.run_id, "t1.0", [CallState.EXECUTING], CallState.SUCCEEDED, {"result": RESULT}
    )
    assert (await ledger.apply(tx)).ok
    return run.run_id


async def _history_text(worker: ModelTurn, run_id: str) -> str:
    items = await worker.ledger.redis.lrange(worker.rt.keys.history(run_id), 0, -1)
    return " ".join(orjson.loads(item).__repr__() for item in items)


async def test_a_result_that_came_with_its_outcome_is_appended_without_a_read(
    worker: ModelTurn,
) -> None:
    run_id = await _turn_with_its_call_run(worker)
    reads = count_run_and_calls(worker.ledger)

    message = CallResult(run_id=run_id, turn=1, call_id="t1.0", state="succeeded", result=RESULT)
    await worker.handle(message, _delivery())

    run = await worker.ledger.get_run(run_id)
    assert run is not None and (run.status, run.turn) == (RunState.AWAITING_MODEL, 2)
    assert "recorded" in await _history_text(worker, run_id)
    assert reads == []


@pytest.mark.parametrize(
    ("state", "result"),
    [
        ("succeeded", ok_result({"key": "k1", "value": "forged"})),
        ("failed", RESULT),
        ("succeeded", error_result("forged", "not what the tool said")),
    ],
    ids=["other-result", "other-state", "other-kind-of-result"],
)
async def test_a_result_message_the_ledger_contradicts_never_reaches_the_model(
    worker: ModelTurn, state: str, result: OkResult | ErrorResult
) -> None:
    run_id = await _turn_with_its_call_run(worker)
    reads = count_run_and_calls(worker.ledger)

    message = CallResult(run_id=run_id, turn=1, call_id="t1.0", state=state, result=result)
    await worker.handle(message, _delivery())

    run = await worker.ledger.get_run(run_id)
    assert run is not None and (run.status, run.turn) == (RunState.AWAITING_MODEL, 2)
    history = await _history_text(worker, run_id)
    assert "recorded" in history and "forged" not in history and "not" not in history
    assert reads == [run_id]  # it decided from the ledger


def test_a_result_message_whose_result_is_no_result_does_not_decode() -> None:
    forged = encode(
        CallResult(run_id="r", turn=1, call_id="t1.0", state="succeeded", result=RESULT)
    )
    with pytest.raises(EnvelopeError, match="result"):
        decode(forged.replace(b'"status":"ok"', b'"status":"maybe"'))
