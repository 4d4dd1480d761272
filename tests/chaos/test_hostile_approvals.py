"""Decisions on the approvals stream that must not apply — forged, bound to another call,
for tampered arguments, from someone without the role, from the requester, replayed — are
refused with a reason in the run's event log and the validator's log, and change nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from callgate.envelopes import ApprovalDecision
from tests.chaos.conftest import Deployment

WORKSHOP = ["callgate.standins.demo.workshop"]


async def refusals(deployment: Deployment, run_id: str, count: int) -> list[dict[str, Any]]:
    """The run's ``approval.refused`` events, once there are ``count`` of them."""
    for _ in range(600):
        found = [e.data for e in await deployment.events(run_id) if e.type == "approval.refused"]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} refusals, got {found}")


async def pending(deployment: Deployment, identity: dict[str, Any]) -> ApprovalDecision:
    """A run paused on reserve_seat, and the decision that would genuinely approve it."""
    run_id = await deployment.submit("chaos-reserve", WORKSHOP, identity=identity)
    view = await deployment.settle(run_id)
    assert view["status"] == "paused_approval"
    call = await deployment.call(run_id, "t1.0")
    assert call.approval_id is not None and call.args_hash is not None
    return ApprovalDecision(
        run_id=run_id, turn=call.turn, call_id=call.call_id, approval_id=call.approval_id,
        decision="approve", approver="carol", args_hash=call.args_hash,
    )  # fmt: skip


async def test_hostile_decisions_are_refused_logged_and_change_nothing(fresh: Deployment) -> None:
    genuine = await pending(fresh, {"user": "alice"})
    hostile = {
        "no such approval": genuine.model_copy(update={"approval_id": "apr_forged"}),
        "does not match the approval's run, turn or call":
            genuine.model_copy(update={"call_id": "t1.1"}),
        "different arguments": genuine.model_copy(update={"args_hash": "0" * 64}),
        "bob does not hold the role events-lead": genuine.model_copy(update={"approver": "bob"}),
    }  # fmt: skip
    for message in hostile.values():
        await fresh.post_decision(message)
    found = await refusals(fresh, genuine.run_id, len(hostile))
    for why in hostile:
        assert any(why in str(event["reason"]) for event in found), (why, found)
    view = await fresh.settle(genuine.run_id)
    assert view["status"] == "paused_approval"
    assert (await fresh.http("booking", "GET", "/_stats"))["reserve"]["requests"] == 0
    logged = [line for line in fresh.worker_logs() if "approval decision refused" in line]
    for why in hostile:
        assert any(why in line and genuine.run_id in line for line in logged), why

    await fresh.post_decision(genuine)
    for _ in range(600):
        if (view := await fresh.settle(genuine.run_id))["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    assert view["status"] == "completed" and view["calls"][0]["state"] == "succeeded"

    await fresh.post_decision(genuine)  # replayed, byte for byte
    replayed = await refusals(fresh, genuine.run_id, len(hostile) + 1)
    assert "already decided" in str(replayed[-1]["reason"])
    stats = await fresh.http("booking", "GET", "/_stats")
    assert stats["reserve"]["requests"] == 1 and stats["reservations"] == 1


async def test_the_requester_cannot_approve_their_own_request(fresh: Deployment) -> None:
    own = await pending(fresh, {"user": "carol", "roles": ["events-lead"]})
    await fresh.post_decision(own)
    found = await refusals(fresh, own.run_id, 1)
    assert "the requester cannot approve their own request" in str(found[0]["reason"])
    assert (await fresh.settle(own.run_id))["status"] == "paused_approval"
    assert (await fresh.http("booking", "GET", "/_stats"))["reserve"]["requests"] == 0


async def test_a_decision_for_a_run_that_does_not_exist_leaves_nothing_behind(
    fresh: Deployment,
) -> None:
    """Refused and logged, but no event log is created for the made-up run (nothing would
    ever expire it)."""
    genuine = await pending(fresh, {"user": "alice"})
    forged = genuine.model_copy(update={"run_id": "run-made-up", "approval_id": "apr_forged"})
    await fresh.post_decision(forged)
    for _ in range(600):
        logged = [line for line in fresh.worker_logs() if "approval decision refused" in line]
        if any("run-made-up" in line and "no such approval" in line for line in logged):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the forged decision was not refused in the validator's log")
    redis = aioredis.Redis.from_url(fresh.settings.redis_url)
    try:
        assert await redis.exists(fresh.keys.events("run-made-up")) == 0
    finally:
        await redis.aclose()
