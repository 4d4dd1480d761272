"""Forged stream messages: the validator decides from the facts model_turn writes with the call
records, and its step is guarded on those facts matching the ledger.  Facts that claim
another identity or other arguments decide nothing; the validator decides from the ledger."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.envelopes import ValidateRequest, encode, new_id
from callgate.facts import DecideFacts, DecideRunFacts, ProposedCall
from callgate.ledger.store import Ledger
from callgate.records import RAW_ARGUMENTS_MAX_BYTES, CallRecord, RunRecord
from callgate.states import CallState, RunState
from tests.chaos.conftest import Deployment
from tests.seed import seed

WORKSHOP = ["check_seats", "check_eligibility", "reserve_seat"]
FOR_BOB = orjson.dumps({"event_id": "ws-101", "participant_id": "p-bob"}).decode()
FOR_ALICE = orjson.dumps({"event_id": "ws-101", "participant_id": "p-alice"}).decode()


async def _validating_run(deployment: Deployment, raw_arguments: str) -> str:
    """A run as model_turn leaves it: alice's, validating turn 1, one reserve_seat call."""
    run_id = f"run-forged-{new_id()}"
    redis = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        ledger = Ledger(redis, deployment.keys, deployment.settings)
        run = RunRecord(
            run_id=run_id,
            status=RunState.VALIDATING,
            api="openai-chat",
            model="chaos-injection",
            input="hello",
            turn=1,
            identity={"user": "alice"},
            allowed_tools=list(WORKSHOP),
        )
        call = CallRecord(
            run_id=run_id,
            call_id="t1.0",
            turn=1,
            index=0,
            provider_call_id=f"call_{new_id()}",
            tool="reserve_seat",
            raw_arguments=raw_arguments,
        )
        await seed(ledger, run, [call])
    finally:
        await redis.aclose()
    return run_id


async def _post(deployment: Deployment, run_id: str, facts: DecideFacts) -> None:
    message = ValidateRequest(run_id=run_id, turn=1, call_ids=("t1.0",), facts=facts)
    redis = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        await redis.xadd(deployment.keys.run_stream("validate", run_id), {"d": encode(message)})
    finally:
        await redis.aclose()


async def _decided(deployment: Deployment, run_id: str) -> CallRecord:
    for _ in range(200):
        call = await deployment.call(run_id, "t1.0")
        if call.state != CallState.REQUESTED:
            return call
        await asyncio.sleep(0.05)
    raise AssertionError("the validator decided nothing")


def _order(user: str, raw: str) -> DecideFacts:
    run = DecideRunFacts(
        identity={"user": user},
        allowed_tools=WORKSHOP,
        batch_policy="hold_effects",
        approval_ttl_s=None,
    )
    call = ProposedCall(call_id="t1.0", index=0, tool="reserve_seat", raw_arguments=raw)
    return DecideFacts(run=run, calls=(call,))


@pytest.mark.parametrize(
    ("user", "raw"),
    [
        # bob may reserve for p-bob (with an approval); the run is alice's, who may not.
        pytest.param("bob", FOR_BOB, id="claiming-another-identity"),
        # The model asked for p-bob; an order saying p-alice (alice's own) must not pass for it.
        pytest.param("alice", FOR_ALICE, id="with-other-arguments"),
    ],
)
async def test_an_order_that_does_not_match_the_ledger_is_decided_as_the_ledger_says(
    fresh: Deployment, user: str, raw: str
) -> None:
    run_id = await _validating_run(fresh, FOR_BOB)
    await _post(fresh, run_id, _order(user, raw))

    call = await _decided(fresh, run_id)

    # alice's run, for p-bob, on the recorded arguments: not hers to reserve, nothing to approve.
    assert call.state == CallState.REJECTED
    assert call.result is not None and call.result.model_dump()["error"]["code"] == "not_authorized"
    assert call.approval_id is None
    assert call.arguments == {"event_id": "ws-101", "participant_id": "p-bob"}
    assert _mismatch_logged(fresh, run_id)


async def test_a_matching_order_is_decided_as_it_stands(fresh: Deployment) -> None:
    run_id = await _validating_run(fresh, FOR_ALICE)
    await _post(fresh, run_id, _order("alice", FOR_ALICE))

    call = await _decided(fresh, run_id)

    # alice may reserve for herself, with a human's approval.
    assert call.state == CallState.NEEDS_APPROVAL
    assert call.approval_id is not None
    assert call.arguments == {"event_id": "ws-101", "participant_id": "p-alice"}
    assert not _mismatch_logged(fresh, run_id)


def _mismatch_logged(deployment: Deployment, run_id: str) -> bool:
    return any(
        "do not match the ledger" in line and run_id in line for line in deployment.worker_logs()
    )


async def test_an_order_longer_than_a_record_keeps_is_decided_from_the_ledger(
    fresh: Deployment,
) -> None:
    # A call record keeps the first RAW_ARGUMENTS_MAX_BYTES of what the model sent; an order
    # whose raw arguments only *begin* with the recorded ones must not pass for them.
    recorded = FOR_ALICE.ljust(RAW_ARGUMENTS_MAX_BYTES)
    run_id = await _validating_run(fresh, recorded + "x")  # the record cuts the "x"
    await _post(fresh, run_id, _order("alice", recorded + "x"))

    call = await _decided(fresh, run_id)

    assert call.raw_arguments == recorded
    assert _mismatch_logged(fresh, run_id)
