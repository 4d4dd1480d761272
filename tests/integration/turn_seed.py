"""A run on turn 1 with calls in chosen states, written by the ledger's own steps: what the
tests of a turn's later steps (a hand-off and resume, an approval releasing its batch) start
from, without the workers that would have got it there."""

from __future__ import annotations

from collections.abc import Sequence

from callgate.clock import now_ms
from callgate.decisions.record import ApprovalRecord
from callgate.records import BatchPolicy, CallRecord, RunRecord
from callgate.states import CallState, RunState
from callgate.streams.service import Runtime
from callgate.tools.contract import Effect

CallSpec = tuple[CallState, Effect, str]
"""A call's state, its effect and its resource (writes on one resource chain in order)."""


async def seed_turn(
    runtime: Runtime,
    run_id: str,
    status: RunState,
    calls: Sequence[CallSpec],
    policy: BatchPolicy = "hold_effects",
) -> list[ApprovalRecord]:
    """The run and its calls ``t1.0``, ``t1.1``, …; each call ``needs_approval`` gets its
    pending approval, returned in call order."""
    ledger = runtime.ledger
    run = RunRecord(
        run_id=run_id, api="openai-responses", model="m", input="hi", turn=1, status=status,
        batch_policy=policy,
    )  # fmt: skip
    tx = ledger.start_run(run, [{"role": "user", "content": "hi"}])
    records = [_call(run_id, i, spec) for i, spec in enumerate(calls)]
    approvals = [_approval(c) for c in records if c.state == CallState.NEEDS_APPROVAL]
    for approval in approvals:
        ledger.request_approval(tx, approval, {})
    ledger.create_calls(tx, records)
    assert (await ledger.apply(tx)).ok
    return approvals


def _call(run_id: str, index: int, spec: CallSpec) -> CallRecord:
    state, effect, resource = spec
    return CallRecord(
        run_id=run_id, call_id=f"t1.{index}", turn=1, index=index, provider_call_id=f"p-{index}",
        tool="bench_read" if effect is Effect.READ else "send_postcard", tool_version="1",
        state=state, effect=effect, arguments={}, resource_key=resource,
        approval_id=f"a{index}" if state == CallState.NEEDS_APPROVAL else None,
    )  # fmt: skip


def _approval(call: CallRecord) -> ApprovalRecord:
    assert call.approval_id is not None
    return ApprovalRecord(
        approval_id=call.approval_id, run_id=call.run_id, turn=1, call_id=call.call_id,
        tool=call.tool, tool_version="1", args_hash="h", arguments="{}", requested_by="alice",
        approver_role="approvers", expires_ms=now_ms() + 600_000,
    )  # fmt: skip
