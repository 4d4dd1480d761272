"""The take step consumes the approval it runs under (issue #31, attack 4), on a real Redis:
``approved → executing`` moves the approval ``approved → consumed`` in the same atomic step, so
a call reset to ``approved`` (as the `workers` login can) finds its approval used and is not
taken; a re-take of the call still ``executing`` (a redelivered read, an idempotent write
retried under its operation id) finds it consumed by this very call and goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import new_id
from callgate.facts import ExecFacts
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, Effect, RunRecord
from callgate.states import CallState, RunState
from tests.seed import seed

APPROVAL = "apr-1"


@pytest.fixture
async def ledger(settings: Settings, redis: aioredis.Redis) -> AsyncIterator[Ledger]:
    yield Ledger(redis, Keys(settings.key_prefix, settings.partitions), settings)


async def _approved_call(ledger: Ledger, approval_state: str = "approved") -> CallRecord:
    run_id = f"run-{new_id()}"
    run = RunRecord(
        run_id=run_id,
        status=RunState.EXECUTING,
        api="openai-chat",
        model="m",
        input="i",
        turn=1,
        identity={"user": "alice"},
        allowed_tools=["reserve_seat"],
    )
    call = CallRecord(
        run_id=run_id,
        call_id="t1.0",
        turn=1,
        index=0,
        provider_call_id="c1",
        tool="reserve_seat",
        tool_version="1",
        arguments={"event_id": "ws-101", "participant_id": "p-alice"},
        raw_arguments="{}",
        effect=Effect.IDEMPOTENT_WRITE,
        state=CallState.APPROVED,
        decision="needs_approval",
        approval_id=APPROVAL,
        operation_id="op-1",
    )
    await seed(ledger, run, [call])
    approval = ApprovalRecord(
        approval_id=APPROVAL,
        run_id=run_id,
        turn=1,
        call_id="t1.0",
        tool="reserve_seat",
        tool_version="1",
        args_hash="h",
        arguments="{}",
        requested_by="alice",
        approver_role="events-lead",
        expires_ms=2**40,
        state=approval_state,
    )  # type: ignore[arg-type]
    key = ledger.keys.approval(run_id, APPROVAL)
    assert (await ledger.apply(Tx().hset(key, approval.to_hash()))).ok
    return call


async def _take(ledger: Ledger, call: CallRecord) -> bool:
    run = await ledger.get_run(call.run_id)
    now = await ledger.get_call(call.run_id, call.call_id)
    assert run is not None and now is not None
    facts = ExecFacts.of(run, now)
    assert facts is not None
    tx, _ = ledger.take_call(call.run_id, call.call_id, facts, now.attempts + 1, "x", APPROVAL)
    return (await ledger.apply(tx)).ok


async def _approval_state(ledger: Ledger, call: CallRecord) -> str:
    found = await ledger.get_approval(call.run_id, APPROVAL)
    assert found is not None
    return found.state


async def test_taking_an_approved_call_consumes_its_approval(ledger: Ledger) -> None:
    call = await _approved_call(ledger)

    assert await _take(ledger, call)

    taken = await ledger.get_call(call.run_id, call.call_id)
    assert taken is not None and taken.state == CallState.EXECUTING
    assert await _approval_state(ledger, call) == "consumed"


async def test_a_call_reset_to_approved_finds_its_approval_used_and_is_not_taken(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    call = await _approved_call(ledger)
    assert await _take(ledger, call)
    await redis.hset(ledger.keys.call(call.run_id, call.call_id), "state", "approved")  # type: ignore[misc]

    assert not await _take(ledger, call)

    after = await ledger.get_call(call.run_id, call.call_id)
    assert after is not None and (after.state, after.attempts) == (CallState.APPROVED, 1)


async def test_a_redelivery_retakes_the_call_its_approval_was_consumed_by(ledger: Ledger) -> None:
    call = await _approved_call(ledger)
    assert await _take(ledger, call)

    assert await _take(ledger, call)  # still executing: attempt 1 → 2, same approval

    after = await ledger.get_call(call.run_id, call.call_id)
    assert after is not None and (after.state, after.attempts) == (CallState.EXECUTING, 2)
    assert await _approval_state(ledger, call) == "consumed"


@pytest.mark.parametrize("state", ["pending", "denied", "withdrawn", "consumed"])
async def test_an_approval_that_is_not_approved_takes_nothing(ledger: Ledger, state: str) -> None:
    call = await _approved_call(ledger, state)

    assert not await _take(ledger, call)

    assert await _approval_state(ledger, call) == state
