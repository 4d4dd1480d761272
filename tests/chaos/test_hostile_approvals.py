"""Decisions that must not apply — unsigned, signed by the wrong key, by someone without the
role, by a delegate for someone it may not speak for, expired, for another approval or other
arguments, the requester's own, replayed — are refused with a reason in the run's event log
and the validator's log, and change nothing: the booking service never hears of them."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import orjson
import redis.asyncio as aioredis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.keyring import LocalKeyring
from callgate.auth.tokens import Signer, sign_decision
from callgate.decisions.claims import approval_claims
from callgate.envelopes import SignedDecision, new_id
from tests.chaos.conftest import Deployment

WORKSHOP = ["callgate.standins.demo.workshop"]


@dataclass(frozen=True)
class Pending:
    """A run paused on reserve_seat: what a genuine decision on it names."""

    run_id: str
    turn: int
    call_id: str
    approval_id: str
    args_hash: str

    def claims(self, **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "run": self.run_id,
            "apr": self.approval_id,
            "call": self.call_id,
            "hash": self.args_hash,
            "reason": None,
            "jti": new_id(),
        }
        fields.update(changes)
        return approval_claims("approve", **fields)

    def decision(self, token: str, jti: str | None = None) -> SignedDecision:
        return SignedDecision(
            msg_id=jti or new_id(), run_id=self.run_id, turn=self.turn, token=token
        )


def keyring() -> LocalKeyring:
    return LocalKeyring(Path(os.environ["CALLGATE_HOME"]))


def signed(pending: Pending, person: str, signer: str | None = None, **changes: Any) -> str:
    return sign_decision(
        keyring().signer(signer or person), person=person, claims=pending.claims(**changes)
    )


async def refusals(
    deployment: Deployment, run_id: str, count: int, reasons: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The run's ``approval.refused`` events, once there are ``count`` of them and one gives
    each of ``reasons`` (validators apply decisions in parallel, so in any order)."""
    for _ in range(600):
        found = [e.data for e in await deployment.events(run_id) if e.type == "approval.refused"]
        given = " | ".join(str(event["reason"]) for event in found)
        if len(found) >= count and all(reason in given for reason in reasons):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} refusals, got {found}")


async def pending(deployment: Deployment, identity: dict[str, Any]) -> Pending:
    run_id = await deployment.submit("chaos-reserve", WORKSHOP, identity=identity)
    view = await deployment.settle(run_id)
    assert view["status"] == "paused_approval"
    call = await deployment.call(run_id, "t1.0")
    assert call.approval_id is not None and call.args_hash is not None
    return Pending(run_id, call.turn, call.call_id, call.approval_id, call.args_hash)


def forged_tokens(genuine: Pending) -> dict[str, str]:
    """Each attack's decision token, by the reason its refusal must give."""
    mallory = Signer("carol", Ed25519PrivateKey.generate())  # claims to be carol's key
    carol = keyring().signer("carol")
    now = int(time.time())
    expired = {
        **genuine.claims(),
        "sub": "carol",
        "typ": "callgate.decision",
        "iat": now - 900,
        "exp": now - 600,
    }
    return {
        "signature": sign_decision(mallory, person="carol", claims=genuine.claims()),
        "dave does not hold the role events-lead": signed(genuine, "dave"),
        "may not sign for": signed(genuine, "alice", signer="slack"),
        "expired": jwt.encode(expired, carol.key, algorithm="EdDSA", headers={"kid": "carol"}),
        "no such approval": signed(genuine, "carol", apr="apr_forged"),
        "different arguments": signed(genuine, "carol", hash="0" * 64),
        "does not match the approval's run or call": signed(genuine, "carol", call="t1.1"),
        "not a token": "not-a-jwt",
    }


async def test_unsigned_and_forged_decisions_are_refused_and_change_nothing(
    fresh: Deployment,
) -> None:
    genuine = await pending(fresh, {"user": "alice"})
    # What approving used to be: a message naming carol, believed.  It no longer decodes.
    unsigned = {
        "kind": "approval_decision",
        "run_id": genuine.run_id,
        "turn": 1,
        "call_id": genuine.call_id,
        "approval_id": genuine.approval_id,
        "decision": "approve",
        "approver": "carol",
        "args_hash": genuine.args_hash,
        "source": "slack",
    }
    await fresh.post_raw("decisions", genuine.run_id, orjson.dumps(unsigned))
    attacks = forged_tokens(genuine)
    for token in attacks.values():
        await fresh.post("decisions", genuine.decision(token))
    reasons = tuple(w for w in attacks if w != "not a token")
    found = await refusals(fresh, genuine.run_id, len(reasons), reasons)
    for why in reasons:
        assert any(why in str(event["reason"]) for event in found), (why, found)
    assert (await fresh.settle(genuine.run_id))["status"] == "paused_approval"
    assert (await fresh.http("booking", "GET", "/_stats"))["reserve"]["requests"] == 0
    logged = [line for line in fresh.worker_logs() if "decision refused" in line]
    assert any("signature" in line and genuine.run_id in line for line in logged)
    assert await _dead_letter_mentions(fresh, genuine.run_id, "approval_decision")


async def test_a_genuine_decision_applies_once_and_its_replay_is_refused(fresh: Deployment) -> None:
    genuine = await pending(fresh, {"user": "alice"})
    jti = new_id()
    message = genuine.decision(signed(genuine, "carol", jti=jti), jti)
    await fresh.post("decisions", message)
    await fresh.post("decisions", message)  # replayed at once, byte for byte
    for _ in range(600):
        if (view := await fresh.settle(genuine.run_id))["status"] == "completed":
            break
        await asyncio.sleep(0.05)
    assert view["status"] == "completed" and view["calls"][0]["state"] == "succeeded"
    await fresh.post("decisions", message)  # and again, after
    found = await refusals(fresh, genuine.run_id, 2)
    assert all(
        "already decided" in str(e["reason"]) or "applied already" in str(e["reason"])
        for e in found
    )
    stats = await fresh.http("booking", "GET", "/_stats")
    assert stats["reserve"]["requests"] == 1 and stats["reservations"] == 1
    approved = [e.data for e in await fresh.events(genuine.run_id) if e.type == "approval.approved"]
    assert [(a["approver"], a["signed_by"]) for a in approved] == [("carol", "carol")]


async def test_the_requester_cannot_approve_their_own_request(fresh: Deployment) -> None:
    own = await pending(fresh, {"user": "carol", "roles": ["events-lead"]})
    await fresh.post("decisions", own.decision(signed(own, "carol")))
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
    made_up = Pending("run-made-up", 1, "t1.0", "apr_forged", genuine.args_hash)
    await fresh.post("decisions", made_up.decision(signed(made_up, "carol")))
    for _ in range(600):
        logged = [line for line in fresh.worker_logs() if "decision refused" in line]
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


async def _dead_letter_mentions(deployment: Deployment, run_id: str, text: str) -> bool:
    redis = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        stream = deployment.keys.dead_letter_for(deployment.keys.run_stream("decisions", run_id))
        entries = await redis.xrange(stream)
    finally:
        await redis.aclose()
    return any(
        text.encode() in fields[b"d"] and run_id.encode() in fields[b"d"] for _, fields in entries
    )
