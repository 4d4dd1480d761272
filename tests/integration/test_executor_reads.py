"""The executor's read path against a real Redis: an allowed read runs from the facts its
exec message carries, is taken and settled (and its message acked) in one step, and facts
that do not match the ledger (stale or forged) settle nothing from themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from callgate.config import Settings
from callgate.envelopes import ExecRequest, decode, encode, new_id
from callgate.facts import ExecCallFacts, ExecFacts, ExecRunFacts
from callgate.records import CallRecord, Effect, RunRecord, ok_result
from callgate.services.executor import Executor
from callgate.states import CallState, RunState
from callgate.streams.commands import ensure_groups
from callgate.streams.service import Runtime, build_runtime
from callgate.streams.worker import Delivery
from tests.ledger_spy import count_run_and_calls
from tests.seed import seed

GROUP = "executor"


@pytest.fixture
async def executor(settings: Settings) -> AsyncIterator[Executor]:
    runtime = build_runtime("executor", settings)
    yield Executor(runtime)
    await runtime.close()


async def _allowed_read(rt: Runtime, ledger_key: str) -> tuple[str, str]:
    run_id = f"run-{new_id()}"
    run = RunRecord(
        run_id=run_id, status=RunState.EXECUTING, api="openai-chat", model="m", input="i",
        turn=1, identity={"user": "alice"}, allowed_tools=["bench_read"],
    )  # fmt: skip
    call = CallRecord(
        run_id=run_id, call_id="t1.0", turn=1, index=0, provider_call_id="call_1",
        tool="bench_read", tool_version="1", arguments={"key": ledger_key},
        raw_arguments="{}", effect=Effect.READ, state=CallState.ALLOWED, decision="allowed",
    )  # fmt: skip
    await seed(rt.ledger, run, [call])
    return run_id, call.call_id


def _order(key: str, version: str = "1", user: str = "alice") -> ExecFacts:
    call = ExecCallFacts(
        tool="bench_read", tool_version=version, effect=Effect.READ, arguments={"key": key}
    )
    return ExecFacts(run=ExecRunFacts(identity={"user": user}), call=call)


async def _deliver(rt: Runtime, message: ExecRequest) -> Delivery:
    """Put ``message`` on its stream and read it as the executor group would."""
    stream = rt.keys.run_stream("exec", message.run_id)
    await ensure_groups(rt.redis, GROUP, [stream])
    await rt.redis.xadd(stream, {"d": encode(message)})
    [[_, [(message_id, _)]]] = await rt.redis.xreadgroup(GROUP, "c", {stream: ">"}, count=1)
    return Delivery(stream, message_id.decode(), 1, GROUP)


async def _results(rt: Runtime, run_id: str) -> list[str]:
    entries = await rt.redis.xrange(rt.keys.run_stream("results", run_id))
    return [decode(fields[b"d"]).msg_id for _, fields in entries]


async def test_an_ordered_read_runs_from_its_message_and_settles_in_one_step(
    executor: Executor,
) -> None:
    rt = executor.rt
    run_id, call_id = await _allowed_read(rt, "k")
    message = ExecRequest(run_id=run_id, turn=1, call_id=call_id, facts=_order("k"))
    delivery = await _deliver(rt, message)
    reads = count_run_and_calls(executor.ledger)

    await executor.handle(message, delivery)

    call = await rt.ledger.get_call(run_id, call_id)
    assert call is not None and call.state == CallState.SUCCEEDED
    assert call.result == ok_result({"key": "k", "value": "value of k"})
    assert reads == []  # nothing was read from the ledger first
    assert call.attempts == 1 and call.executor == rt.consumer
    moves = [
        (e.data["from"], e.data["to"])
        for e in await rt.ledger.events(run_id)
        if e.type == "call.transition"
    ]
    assert moves == [(["allowed"], "executing"), (["executing"], "succeeded")]
    assert delivery.settled
    assert (await rt.redis.xpending(delivery.stream, GROUP))["pending"] == 0
    assert len(await _results(rt, run_id)) == 1


@pytest.mark.parametrize(
    "order",
    [_order("forged"), _order("k", user="admin")],
    ids=["other-arguments", "other-identity"],
)
async def test_an_order_the_ledger_contradicts_runs_as_the_ledger_says(
    executor: Executor, order: ExecFacts
) -> None:
    rt = executor.rt
    run_id, call_id = await _allowed_read(rt, "k")
    message = ExecRequest(run_id=run_id, turn=1, call_id=call_id, facts=order)
    reads = count_run_and_calls(executor.ledger)

    await executor.handle(message, await _deliver(rt, message))

    call = await rt.ledger.get_call(run_id, call_id)
    assert call is not None and call.state == CallState.SUCCEEDED
    assert call.result == ok_result({"key": "k", "value": "value of k"})
    assert reads == [run_id]
    assert len(await _results(rt, run_id)) == 1


async def test_an_order_for_a_call_already_settled_writes_nothing(executor: Executor) -> None:
    rt = executor.rt
    run_id, call_id = await _allowed_read(rt, "first")
    first = ExecRequest(run_id=run_id, turn=1, call_id=call_id, facts=_order("first"))
    await executor.handle(first, await _deliver(rt, first))
    again = ExecRequest(run_id=run_id, turn=1, call_id=call_id, facts=_order("second"))
    delivery = await _deliver(rt, again)

    await executor.handle(again, delivery)

    call = await rt.ledger.get_call(run_id, call_id)
    assert call is not None and call.result is not None
    assert call.result == ok_result({"key": "first", "value": "value of first"})
    assert len(await _results(rt, run_id)) == 1
    assert not delivery.settled  # the step did not apply: the runner acks it


async def test_an_order_naming_another_tool_version_falls_back_to_the_ledger(
    executor: Executor,
) -> None:
    rt = executor.rt
    run_id, call_id = await _allowed_read(rt, "from-ledger")
    message = ExecRequest(
        run_id=run_id, turn=1, call_id=call_id, facts=_order("from-order", version="0")
    )
    await executor.handle(message, await _deliver(rt, message))

    call = await rt.ledger.get_call(run_id, call_id)
    assert call is not None and call.result is not None
    assert call.result == ok_result({"key": "from-ledger", "value": "value of from-ledger"})


def test_a_read_order_is_only_what_its_fields_say() -> None:
    """Strict like every envelope: a forged extra field or a wrong type does not decode."""
    good = ExecRequest(run_id="r", turn=1, call_id="c", facts=_order("k"))
    assert decode(encode(good)) == good
    raw = encode(good).replace(b'"identity":', b'"admin":true,"identity":')
    with pytest.raises(Exception, match="admin"):
        decode(raw)
