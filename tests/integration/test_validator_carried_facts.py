"""A validate order whose carried facts make deciding raise (an approval lifetime no record could
hold, which the envelope now refuses to decode — here the message is built past that check, as
a future field might slip through) is decided from the ledger's facts instead: the handler
does not raise, so the order is never redelivered into a dead letter that fails its run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.envelopes import ValidateRequest
from callgate.facts import DecideFacts, DecideRunFacts, ProposedCall
from callgate.records import CallRecord, RunRecord
from callgate.services import validator
from callgate.states import CallState, RunState
from callgate.streams.delivery import Delivery
from callgate.streams.service import Runtime, build_runtime

ARGUMENTS = '{"memo": "budget 2027"}'


@pytest.fixture
async def signoff(settings: Settings) -> AsyncIterator[Runtime]:
    """A validator's runtime whose deployment registers the sign-off tool (approval, no
    preconditions: nothing guarded runs before its approval is built)."""
    modules = (*settings.tool_modules, "tests.chaos.signoff_tool")
    rt = build_runtime("validator", settings.model_copy(update={"tool_modules": modules}))
    try:
        yield rt
    finally:
        await rt.close()


async def _validating(rt: Runtime, run_id: str) -> None:
    run = RunRecord(
        run_id=run_id, api="openai-chat", model="m", input="sign it", turn=1,
        status=RunState.VALIDATING, identity={"user": "alice"}, allowed_tools=["sign_off"],
    )  # fmt: skip
    call = CallRecord(
        run_id=run_id, call_id="t1.0", turn=1, index=0, provider_call_id="p-1", tool="sign_off",
        raw_arguments=ARGUMENTS, state=CallState.REQUESTED,
    )  # fmt: skip
    tx = rt.ledger.start_run(run, [{"role": "user", "content": "sign it"}])
    rt.ledger.create_calls(tx, [call])
    assert (await rt.ledger.apply(tx)).ok


def _forged_order(run_id: str) -> ValidateRequest:
    run = DecideRunFacts.model_construct(
        identity={"user": "alice"},
        allowed_tools=["sign_off"],
        batch_policy="hold_effects",
        approval_ttl_s=1e308,
    )
    call = ProposedCall.model_construct(
        call_id="t1.0", index=0, tool="sign_off", raw_arguments=ARGUMENTS
    )
    facts = DecideFacts.model_construct(run=run, calls=(call,))
    return ValidateRequest.model_construct(
        run_id=run_id,
        turn=1,
        call_ids=("t1.0",),
        facts=facts,
        kind="validate_request",
        v=1,
        msg_id="forged",
    )


async def test_carried_facts_that_make_deciding_raise_give_way_to_the_ledgers(
    signoff: Runtime,
) -> None:
    run_id = "carried-overflow"
    await _validating(signoff, run_id)
    handle = await validator.SPEC.make_handler(signoff)
    stream = signoff.keys.run_stream("validate", run_id)

    await handle(_forged_order(run_id), Delivery(stream, "1-1", 1))

    run, [call] = await signoff.ledger.run_and_calls(run_id, ["t1.0"])
    assert run is not None and run.status == RunState.PAUSED_APPROVAL
    assert call is not None and call.state == CallState.NEEDS_APPROVAL
    assert call.approval_id is not None
    approval = await signoff.ledger.get_approval(run_id, call.approval_id)
    assert approval is not None
    ttl_ms = signoff.settings.approval_ttl_s * 1000  # the ledger's: the run names none
    assert 0 < approval.expires_ms - now_ms() <= ttl_ms
