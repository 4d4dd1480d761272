"""A run that ends while a call waits for a person — failed by a dead letter through the real
stream loop and the validator's own hook, or handed off at its deadline by the ingress sweep —
lists no approval as pending afterwards: not in the inbox (`ApprovalDesk.pending`), not in the
pending index the expiry sweep walks, and the approval record itself says it was withdrawn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from callgate.clock import now_ms
from callgate.decisions.desk import ApprovalDesk
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import Envelope, ValidateRequest
from callgate.errors import EnvelopeError
from callgate.records import CallRecord, RunRecord
from callgate.services import validator
from callgate.states import CallState, RunState
from callgate.streams.commands import post
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, serve
from callgate.sweeps import hand_off_expired

HOUR_MS = 3_600_000


async def _paused_on_approval(runtime: Runtime, run_id: str) -> ApprovalRecord:
    """A run paused on turn 1's one call, which waits for an events-lead (deadline passed)."""
    ledger = runtime.ledger
    run = RunRecord(
        run_id=run_id, api="openai-responses", model="m", input="hi", turn=1,
        status=RunState.PAUSED_APPROVAL, deadline_ms=now_ms() - 1,
    )  # fmt: skip
    approval = ApprovalRecord(
        approval_id=f"apr_{run_id}", run_id=run_id, turn=1, call_id="t1.0", tool="reserve_seat",
        tool_version="1", args_hash="h" * 64, arguments="{}", requested_by="alice",
        approver_role="events-lead", expires_ms=now_ms() + HOUR_MS,
    )  # fmt: skip
    call = CallRecord(
        run_id=run_id, call_id="t1.0", turn=1, index=0, provider_call_id="p-1",
        tool="reserve_seat", state=CallState.NEEDS_APPROVAL, approval_id=approval.approval_id,
    )  # fmt: skip
    tx = ledger.start_run(run, [{"role": "user", "content": "hi"}])
    ledger.create_calls(tx, [call])
    ledger.request_approval(tx, approval, {})
    assert (await ledger.apply(tx)).ok
    assert [a.approval_id for a in await _desk(runtime).pending()] == [approval.approval_id]
    return approval


def _desk(runtime: Runtime) -> ApprovalDesk:
    return ApprovalDesk(runtime.redis, runtime.keys, runtime.ledger)


async def _always_fails(runtime: Runtime) -> Handler:
    async def handle(message: Envelope, delivery: Delivery) -> None:
        raise EnvelopeError(f"cannot handle {message.kind}")

    return handle


async def _dead_letter(runtime: Runtime, run_id: str) -> None:
    """A validate order of the run's turn that no delivery settles: the hook fails the run."""
    order = ValidateRequest(run_id=run_id, turn=1, call_ids=("t1.0",))
    await post(runtime.redis, runtime.keys.run_stream("validate", run_id), order)
    spec = validator.SPEC
    await serve(
        ServiceSpec(spec.name, ("validate",), _always_fails, spec.on_dead_letter),
        runtime,
        burst=True,
    )


async def _deadline(runtime: Runtime, run_id: str) -> None:
    assert await hand_off_expired(runtime, run_id, now_ms())


@pytest.mark.parametrize(
    ("end", "status"),
    [(_dead_letter, RunState.FAILED), (_deadline, RunState.HANDED_OFF)],
    ids=["dead-letter", "deadline"],
)
async def test_a_run_that_ends_lists_no_approval_as_pending(
    runtime: Runtime, end: Callable[[Runtime, str], Awaitable[None]], status: RunState
) -> None:
    run_id = f"ended-{status.value}"
    approval = await _paused_on_approval(runtime, run_id)
    await end(runtime, run_id)

    run, [call] = await runtime.ledger.run_and_calls(run_id, ["t1.0"])
    assert run is not None and run.status == status
    assert await _desk(runtime).pending() == []
    index = runtime.keys.pending_approvals(runtime.keys.partition(run_id))
    assert await runtime.redis.zrange(index, 0, -1) == []
    record = await runtime.ledger.get_approval(run_id, approval.approval_id)
    assert record is not None and record.state == "withdrawn"
    assert record.reason is not None and record.reason.startswith(f"the run ended ({status.value})")
    assert call is not None and call.state == CallState.CANCELLED
