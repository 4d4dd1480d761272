"""The executor and the approval it runs a call under, against a real Redis (issue #31,
attack 4): an approval-gated idempotent write runs under a verified approval and consumes it;
a redelivery that finds the call still ``executing`` (its executor died after the take) sends
it again under the same operation id, the approval consumed by this very call; an approval a
call already used, or none where the tool asks for one, sends nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from callgate.auth.tokens import sign_decision
from callgate.config import Settings
from callgate.decisions.claims import approval_claims
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import ExecRequest, encode, new_id
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, Effect, RunRecord
from callgate.services.executor import Executor
from callgate.states import CallState, RunState
from callgate.streams.commands import ensure_groups
from callgate.streams.service import Runtime, build_runtime
from callgate.streams.worker import Delivery
from callgate.tools.canonical import args_hash
from callgate.tools.contract import Tool, ToolContext
from callgate.tools.registry import ToolRegistry
from tests.chaos.test_hostile_approvals import keyring
from tests.seed import seed

ARGS = {"memo": "budget 2027"}
SENT: list[str] = []
"""The operation ids the tool was called with, in order."""


class HoldArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memo: str


async def _hold(ctx: ToolContext, args: HoldArgs, operation_id: str) -> dict[str, Any]:
    SENT.append(operation_id)
    return {"held": args.memo}


GATED = Tool(
    name="gated_hold",
    version="1",
    description="Hold, with an events-lead's approval.",
    args_model=HoldArgs,
    effect=Effect.IDEMPOTENT_WRITE,
    execute=_hold,
    approval=lambda identity, args: "events-lead",
)


@pytest.fixture
async def executor(settings: Settings) -> AsyncIterator[Executor]:
    runtime = build_runtime("executor", settings)
    runtime.registry = ToolRegistry([GATED])
    SENT.clear()
    yield Executor(runtime)
    await runtime.close()


async def _gated_call(
    rt: Runtime, state: CallState, approval: str | None, attempts: int = 0
) -> CallRecord:
    """alice's gated_hold call in ``state``, under an approval carol signed (in state
    ``approval``; None: the call names none)."""
    run_id = f"run-{new_id()}"
    run = RunRecord(
        run_id=run_id,
        status=RunState.EXECUTING,
        api="openai-chat",
        model="m",
        input="i",
        turn=1,
        identity={"user": "alice"},
        allowed_tools=["gated_hold"],
    )
    call = CallRecord(
        run_id=run_id,
        call_id="t1.0",
        turn=1,
        index=0,
        provider_call_id="c1",
        tool="gated_hold",
        tool_version="1",
        arguments=ARGS,
        raw_arguments="{}",
        effect=Effect.IDEMPOTENT_WRITE,
        state=state,
        decision="needs_approval",
        approval_id=None if approval is None else "apr-1",
        operation_id="op-1",
        attempts=attempts,
    )
    await seed(rt.ledger, run, [call])
    if approval is not None:
        record = _signed_approval(run_id, approval)
        await rt.ledger.apply(Tx().hset(rt.keys.approval(run_id, "apr-1"), record.to_hash()))
    return call


def _signed_approval(run_id: str, state: str) -> ApprovalRecord:
    hashed = args_hash(ARGS)
    claims = approval_claims(
        "approve", run=run_id, apr="apr-1", call="t1.0", hash=hashed, reason=None, jti=new_id()
    )
    token = sign_decision(keyring().signer("carol"), person="carol", claims=claims)
    now = int(time.time() * 1000)
    return ApprovalRecord.model_validate(
        dict(
            approval_id="apr-1",
            run_id=run_id,
            turn=1,
            call_id="t1.0",
            tool="gated_hold",
            tool_version="1",
            args_hash=hashed,
            arguments="{}",
            requested_by="alice",
            approver_role="events-lead",
            expires_ms=now + 60_000,
            state=state,
            decided_by="carol",
            decided_ms=now,
            signed_by="carol",
            decision_token=token,
        )
    )


async def _deliver(executor: Executor, call: CallRecord) -> CallRecord:
    """Order ``call`` executed, as its exec message reaches the executor; the call after."""
    rt = executor.rt
    message = ExecRequest(run_id=call.run_id, turn=1, call_id=call.call_id)
    stream = rt.keys.run_stream("exec", call.run_id)
    await ensure_groups(rt.redis, "executor", [stream])
    await rt.redis.xadd(stream, {"d": encode(message)})
    [[_, [(message_id, _)]]] = await rt.redis.xreadgroup("executor", "c", {stream: ">"}, count=1)
    await executor.handle(message, Delivery(stream, message_id.decode(), 1, "executor"))
    after = await rt.ledger.get_call(call.run_id, call.call_id)
    assert after is not None
    return after


async def _approval_state(rt: Runtime, call: CallRecord) -> str:
    found = await rt.ledger.get_approval(call.run_id, "apr-1")
    assert found is not None
    return found.state


async def test_an_approved_call_runs_once_and_consumes_its_approval(executor: Executor) -> None:
    call = await _gated_call(executor.rt, CallState.APPROVED, "approved")

    after = await _deliver(executor, call)

    assert after.state == CallState.SUCCEEDED and SENT == ["op-1"]
    assert await _approval_state(executor.rt, call) == "consumed"


async def test_a_redelivery_of_the_call_that_consumed_its_approval_is_sent_again(
    executor: Executor,
) -> None:
    # The first executor took the call (consuming the approval) and died before settling it.
    call = await _gated_call(executor.rt, CallState.EXECUTING, "consumed", attempts=1)

    after = await _deliver(executor, call)

    assert (after.state, after.attempts) == (CallState.SUCCEEDED, 2)
    assert SENT == ["op-1"], "retried under its operation id"


@pytest.mark.parametrize(
    ("state", "approval", "why"),
    [
        pytest.param(CallState.APPROVED, "consumed", "used already", id="approval-used"),
        pytest.param(
            CallState.ALLOWED, None, "needs an approval by events-lead", id="approval-stripped"
        ),
        pytest.param(CallState.EXECUTING, "approved", "not consumed", id="taken-unconsumed"),
    ],
)
async def test_a_gated_call_without_a_usable_approval_sends_nothing(
    executor: Executor, state: CallState, approval: str | None, why: str
) -> None:
    call = await _gated_call(
        executor.rt, state, approval, attempts=1 if state == CallState.EXECUTING else 0
    )

    after = await _deliver(executor, call)

    assert after.state == CallState.FAILED and SENT == []
    assert after.result is not None
    error = after.result.model_dump()["error"]
    assert error["code"] == "approval_mismatch" and why in error["message"], error
