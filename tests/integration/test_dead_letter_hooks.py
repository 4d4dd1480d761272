"""A message no worker can handle fails the run it is bound to — through each real worker's
own dead-letter hook and the real stream loop — and fails nothing when it names another turn
(a stale or forged message must not end a live run)."""

from __future__ import annotations

import pytest

from callgate.envelopes import (
    Envelope,
    EnvelopeBase,
    ExecRequest,
    ReconcileRequest,
    TurnRequest,
    ValidateRequest,
    encode,
)
from callgate.errors import EnvelopeError
from callgate.records import CallRecord, RunRecord
from callgate.services import executor, model_turn, reconciler, validator
from callgate.states import CallState, RunState
from callgate.streams.commands import post
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, serve
from callgate.streams.worker import DeadLetter

WORKERS = {
    "model_turn": (model_turn.SPEC, "turns"),
    "executor": (executor.SPEC, "exec"),
    "validator": (validator.SPEC, "validate"),
}


def _poison(worker: str, run_id: str, turn: int) -> EnvelopeBase:
    if worker == "model_turn":
        return TurnRequest(run_id=run_id, turn=turn)
    if worker == "executor":
        return ExecRequest(run_id=run_id, turn=turn, call_id="t2.0")
    return ValidateRequest(run_id=run_id, turn=turn, call_ids=("t2.0",))


async def _always_fails(runtime: Runtime) -> Handler:
    async def handle(message: Envelope, delivery: Delivery) -> None:
        raise EnvelopeError(f"cannot handle {message.kind}")

    return handle


async def _live_run(
    runtime: Runtime,
    run_id: str,
    *,
    tool: str = "bench_read",
    attempts: int = 0,
    state: CallState = CallState.EXECUTING,
) -> None:
    """A run on its second turn with one call of that turn, executing."""
    ledger = runtime.ledger
    run = RunRecord(
        run_id=run_id, api="openai-responses", model="m", input="hi", turn=2,
        status=RunState.EXECUTING,
    )  # fmt: skip
    tx = ledger.start_run(run, [{"role": "user", "content": "hi"}])
    call = CallRecord(
        run_id=run_id, call_id="t2.0", turn=2, index=0, provider_call_id="p-1", tool=tool,
        state=state, attempts=attempts,
    )  # fmt: skip
    ledger.create_calls(tx, [call])
    assert (await ledger.apply(tx)).ok


@pytest.mark.parametrize("worker", list(WORKERS))
@pytest.mark.parametrize("bound", [True, False], ids=["bound", "other-turn"])
async def test_a_poison_message_fails_only_the_run_it_is_bound_to(
    runtime: Runtime, worker: str, bound: bool
) -> None:
    spec, kind = WORKERS[worker]
    run_id = f"dl-{worker}-{bound}"
    await _live_run(runtime, run_id)
    message = _poison(worker, run_id, turn=2 if bound else 1)
    await post(runtime.redis, runtime.keys.run_stream(kind, run_id), message)

    failing = ServiceSpec(spec.name, spec.stream_kinds, _always_fails, spec.on_dead_letter)
    await serve(failing, runtime, burst=True)

    run = await runtime.ledger.get_run(run_id)
    assert run is not None
    if bound:
        assert run.status == RunState.FAILED
        assert run.reason == f"dead letter: EnvelopeError: cannot handle {message.kind}"
    else:
        assert run.status == RunState.EXECUTING


@pytest.mark.parametrize("tool", ["send_postcard", "hold_seat"], ids=["write", "idempotent"])
async def test_a_dead_exec_order_sends_its_executing_write_to_the_reconciler(
    runtime: Runtime, tool: str
) -> None:
    """Consumers kept dying while a write, idempotent or not, was in flight: it may have
    happened, so it is never left ``executing`` (where nothing settles it) and its run is not
    failed; it goes to the reconciler, as when a redelivery finds it orphaned, and from there
    to a person if the reconciler cannot tell."""
    run_id = f"dl-write-in-flight-{tool}"
    await _live_run(runtime, run_id, tool=tool, attempts=1)
    order = ExecRequest(run_id=run_id, turn=2, call_id="t2.0")
    await post(runtime.redis, runtime.keys.run_stream("exec", run_id), order)

    failing = ServiceSpec("executor", ("exec",), _always_fails, executor.SPEC.on_dead_letter)
    await serve(failing, runtime, burst=True)

    run, [call] = await runtime.ledger.run_and_calls(run_id, ["t2.0"])
    assert run is not None and run.status == RunState.EXECUTING
    assert call is not None and call.state == CallState.UNKNOWN
    queued = await runtime.redis.xrange(runtime.keys.run_stream("reconcile", run_id))
    assert len(queued) == 1


@pytest.mark.parametrize(
    ("kind", "call_ids", "fails"),
    [
        ("validate", ("t2.0",), True),
        ("decisions", ("t2.0",), False),
        ("validate", ("t2.9",), False),
    ],
    ids=["own-stream", "decisions-stream", "no-such-call"],
)
async def test_a_dead_validate_order_fails_its_run_only_from_the_validate_stream(
    runtime: Runtime, kind: str, call_ids: tuple[str, ...], fails: bool
) -> None:
    """The hook alone (the stream loop would not even hand it a validate order from the
    decisions stream, which approvers and the Slack bot may write): a dead letter fails the
    run only when it came on the validator's own work stream and names the turn's calls."""
    run_id = f"dl-hook-{kind}-{fails}"
    await _live_run(runtime, run_id)
    order = ValidateRequest(run_id=run_id, turn=2, call_ids=call_ids)
    letter = DeadLetter(
        runtime.keys.run_stream(kind, run_id), "1-1", "poison", 5, encode(order), order
    )
    assert validator.SPEC.on_dead_letter is not None
    await validator.SPEC.on_dead_letter(runtime, letter)

    run = await runtime.ledger.get_run(run_id)
    assert run is not None
    assert run.status == (RunState.FAILED if fails else RunState.EXECUTING)


async def test_a_message_off_its_stream_is_dead_lettered_before_any_handler(
    runtime: Runtime,
) -> None:
    """A validate order bound to the live turn, posted on the decisions stream: the loop
    dead-letters it with the reason, the handler never sees it, the run is not failed."""
    run_id = "dl-off-stream"
    await _live_run(runtime, run_id)
    order = ValidateRequest(run_id=run_id, turn=2, call_ids=("t2.0",))
    stream = runtime.keys.run_stream("decisions", run_id)
    await post(runtime.redis, stream, order)

    failing = ServiceSpec(
        "validator", validator.SPEC.stream_kinds, _always_fails, validator.SPEC.on_dead_letter
    )
    await serve(failing, runtime, burst=True)

    [(_, fields)] = await runtime.redis.xrange(runtime.keys.dead_letter_for(stream))
    assert fields[b"reason"].decode() == f"'validate_request' is not carried on {stream}"
    run = await runtime.ledger.get_run(run_id)
    assert run is not None and run.status == RunState.EXECUTING


@pytest.mark.parametrize("kind", ["reconcile", "decisions"])
async def test_a_dead_reconcile_order_goes_to_a_person_only_from_the_reconcile_stream(
    runtime: Runtime, kind: str
) -> None:
    """A write whose outcome is unknown goes to a person when its reconcile order dies on the
    reconcile stream; a letter that names it from any other stream changes nothing."""
    run_id = f"dl-reconcile-{kind}"
    await _live_run(runtime, run_id, tool="send_postcard", attempts=1, state=CallState.UNKNOWN)
    order = ReconcileRequest(run_id=run_id, turn=2, call_id="t2.0")
    letter = DeadLetter(
        runtime.keys.run_stream(kind, run_id), "1-1", "poison", 5, encode(order), order
    )
    assert reconciler.SPEC.on_dead_letter is not None
    await reconciler.SPEC.on_dead_letter(runtime, letter)

    run, [call] = await runtime.ledger.run_and_calls(run_id, ["t2.0"])
    assert run is not None and call is not None
    if kind == "reconcile":
        assert (run.status, call.state) == (RunState.PAUSED_UNKNOWN_OUTCOME, CallState.UNRESOLVED)
    else:
        assert (run.status, call.state) == (RunState.EXECUTING, CallState.UNKNOWN)
