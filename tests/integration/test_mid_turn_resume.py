"""A run handed off mid-turn (its deadline passed while calls ran) takes its turn up again when
a person resumes it: each call from the state it was left in.  The ledger's own steps on a real
Redis build each state the hand-off can leave; what the resume sends next is read off the
streams the workers read.  (End to end, with real workers: tests/e2e/test_cancel_resume.py.)"""

from __future__ import annotations

import pytest

from callgate.envelopes import CallResult, ExecRequest, ValidateRequest, decode
from callgate.ledger.approval_steps import Decider
from callgate.records import RunRecord
from callgate.states import CallState, RunState
from callgate.streams.service import Runtime
from callgate.sweeps import DEADLINE_REACHED
from callgate.tools.contract import Effect
from tests.integration.turn_seed import seed_turn

C = CallState


async def handed_off(
    runtime: Runtime, run_id: str, status: RunState, calls: list[tuple[CallState, Effect]]
) -> RunRecord:
    """A run in ``status`` on turn 1 with ``calls`` (state, effect; each its own resource),
    handed off by its deadline."""
    await seed_turn(runtime, run_id, status, [(s, e, f"r{i}") for i, (s, e) in enumerate(calls)])
    ledger = runtime.ledger
    run = await ledger.get_run(run_id)
    assert run is not None
    assert (await ledger.apply(await ledger.end_run(run, RunState.HANDED_OFF, DEADLINE_REACHED))).ok
    ended = await ledger.get_run(run_id)
    assert ended is not None and ended.status == RunState.HANDED_OFF
    return ended


async def resume(runtime: Runtime, run: RunRecord) -> RunRecord:
    ledger = runtime.ledger
    calls = await ledger.turn_calls(run.run_id, run.turn)
    decider = Decider("alice", "alice", "token", f"jti-{run.run_id}")
    tx = await ledger.resume_run(
        run, decider, turn=run.turn, max_turns=5, deadline_ms=None, max_total_tokens=None,
        msg_id="m-1", calls=calls,
    )  # fmt: skip
    assert (await ledger.apply(tx)).ok
    after = await ledger.get_run(run.run_id)
    assert after is not None
    return after


async def sent(runtime: Runtime, kind: str, run_id: str) -> list[object]:
    entries = await runtime.redis.xrange(runtime.keys.run_stream(kind, run_id))
    return [m for m in (decode(f[b"d"]) for _, f in entries) if m.run_id == run_id]


async def test_calls_never_decided_go_to_the_validator_again(runtime: Runtime) -> None:
    run = await handed_off(
        runtime, "mt-validating", RunState.VALIDATING, [(C.REQUESTED, Effect.READ)] * 2
    )
    assert (await resume(runtime, run)).status == RunState.VALIDATING
    [request] = await sent(runtime, "validate", run.run_id)
    assert isinstance(request, ValidateRequest) and request.call_ids == ("t1.0", "t1.1")


async def test_writes_a_batch_held_for_its_approvals_are_sent_once_resumed(
    runtime: Runtime,
) -> None:
    """Paused for an approval: the hand-off cancels the call waiting for a person; the allowed
    write its batch held back goes to an executor, and model_turn is asked to look."""
    calls = [
        (C.NEEDS_APPROVAL, Effect.WRITE),
        (C.ALLOWED, Effect.WRITE),
        (C.SUCCEEDED, Effect.READ),
    ]
    run = await handed_off(runtime, "mt-held", RunState.PAUSED_APPROVAL, calls)
    assert (await resume(runtime, run)).status == RunState.EXECUTING
    [order] = await sent(runtime, "exec", run.run_id)
    assert isinstance(order, ExecRequest) and order.call_id == "t1.1"
    [look] = await sent(runtime, "results", run.run_id)
    assert isinstance(look, CallResult) and look.turn == 1


@pytest.mark.parametrize(
    "state", [C.ALLOWED, C.EXECUTING, C.SUCCEEDED], ids=["chained", "in-flight", "settled"]
)
async def test_what_was_sent_before_the_hand_off_is_not_sent_twice(
    runtime: Runtime, state: CallState
) -> None:
    """Handed off while executing: every call already has its message (or is chained behind
    one, or settled unjoined), so only model_turn is asked to look."""
    calls = [(C.SUCCEEDED, Effect.WRITE), (state, Effect.WRITE)]
    run = await handed_off(runtime, f"mt-sent-{state}", RunState.EXECUTING, calls)
    assert (await resume(runtime, run)).status == RunState.EXECUTING
    assert await sent(runtime, "exec", run.run_id) == []
    assert len(await sent(runtime, "results", run.run_id)) == 1
