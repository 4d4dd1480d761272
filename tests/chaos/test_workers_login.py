"""The `workers` login attacks an approval (issue #31, attack 4): on a deployment locked down as
deploy/redis/users.acl says, with every worker running as `workers`, the attacker holds that same
login — it may write any ledger key and any stream.  It strips an approval-gated call of its
approval (``state allowed``, no ``approval_id``) and orders it executed; it resets an executed
approved call to ``approved`` and orders it again.  The executor asks the registered tool
whether the call needs an approval, verifies one, and consumes it in the step that takes the
call: the first write never reaches the booking service, the second reaches it once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from callgate.auth.tokens import sign_decision
from callgate.client import CallgateClient
from callgate.decisions.claims import approval_claims
from callgate.envelopes import EnvelopeBase, ExecRequest, SignedDecision, encode, new_id
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.records import CallRecord
from callgate.states import CallState
from callgate.tools.registry import load_registry
from tests.chaos.test_hostile_approvals import keyring
from tests.integration.redis_lockdown import PREFIX, LockedRedis, locked_redis

pytestmark = pytest.mark.slow

WORKSHOP = ["callgate.standins.demo.workshop"]
CALL = "t1.0"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedRedis]:
    with locked_redis(tmp_path_factory.mktemp("acl")) as server:
        yield server


@pytest.fixture(scope="module")
def system(locked: LockedRedis) -> Iterator[LocalSystem]:
    """Every worker and the booking service, the workers logged in as ``workers``."""
    spec = SystemSpec(
        services=("booking",),
        scripted_model=True,
        redis_url=locked.url("workers"),
        key_prefix=PREFIX,
        grace_s=3.0,
    )
    with LocalSystem(spec) as started:
        yield started


@asynccontextmanager
async def _login(locked: LockedRedis, user: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(locked.url(user))
    try:
        yield client
    finally:
        await client.aclose()


class Attack:
    def __init__(self, locked: LockedRedis, system: LocalSystem) -> None:
        self.locked = locked
        self.system = system
        self.keys = Keys(PREFIX, locked.settings("workers").partitions)

    async def submit(self) -> str:
        """alice's reservation for herself, as a submitting service enqueues it."""
        spec = {
            "api": "openai-chat",
            "model": "chaos-reserve",
            "input": "hello",
            "identity": {"user": "alice"},
            "max_turns": 4,
            "allowed_tools": list(load_registry(WORKSHOP).names()),
        }
        async with CallgateClient(self.locked.settings("submitters")) as client:
            return await client.submit(spec)

    async def call(self, run_id: str) -> CallRecord | None:
        async with _login(self.locked, "workers") as redis:
            ledger = Ledger(redis, self.keys, self.locked.settings("workers"))
            return await ledger.get_call(run_id, CALL)

    async def until(self, run_id: str, done: Any, timeout_s: float = 30) -> CallRecord:
        deadline = time.monotonic() + timeout_s
        call = None
        while time.monotonic() < deadline:
            call = await self.call(run_id)
            if call is not None and done(call):
                return call
            await asyncio.sleep(0.05)
        raise AssertionError(f"{run_id}/{CALL} did not get there: {call}")

    async def approve(self, call: CallRecord) -> None:
        """carol's signed approval, posted on the decisions stream as ``approvers``."""
        assert call.approval_id is not None and call.args_hash is not None
        claims = approval_claims(
            "approve",
            run=call.run_id,
            apr=call.approval_id,
            call=call.call_id,
            hash=call.args_hash,
            reason=None,
            jti=new_id(),
        )
        token = sign_decision(keyring().signer("carol"), person="carol", claims=claims)
        await self.post(
            "approvers",
            "decisions",
            SignedDecision(run_id=call.run_id, turn=call.turn, token=token),
        )

    async def post(self, user: str, kind: str, message: EnvelopeBase) -> None:
        async with _login(self.locked, user) as redis:
            await redis.xadd(self.keys.run_stream(kind, message.run_id), {"d": encode(message)})

    async def forge(self, call: CallRecord, state: str, *, strip: bool) -> None:
        """As ``workers``: set the call's state (and drop its approval), order it executed."""
        async with _login(self.locked, "workers") as redis:
            key = self.keys.call(call.run_id, call.call_id)
            await redis.hset(key, "state", state)  # type: ignore[misc]
            if strip:
                await redis.hdel(key, "approval_id")  # type: ignore[misc]
        await self.post(
            "workers", "exec", ExecRequest(run_id=call.run_id, turn=call.turn, call_id=call.call_id)
        )

    async def approval_state(self, call: CallRecord) -> str:
        assert call.approval_id is not None
        async with _login(self.locked, "workers") as redis:
            state = await redis.hget(  # type: ignore[misc]
                self.keys.approval(call.run_id, call.approval_id), "state"
            )
        return str(state.decode())

    async def reserve_requests(self, run_id: str) -> int:
        url = f"{self.system.urls['booking']}/_stats/runs/{run_id}"
        async with aiohttp.ClientSession() as http, http.get(url) as reply:
            found = await reply.json()
        return int(found["requests"].get("reserve", 0))


@pytest.fixture
def attack(locked: LockedRedis, system: LocalSystem) -> Attack:
    return Attack(locked, system)


def _error(call: CallRecord) -> dict[str, str]:
    assert call.result is not None
    return dict(call.result.model_dump()["error"])


def _settled(call: CallRecord) -> bool:
    return call.state in (CallState.SUCCEEDED, CallState.FAILED, CallState.UNKNOWN)


async def test_a_call_stripped_of_its_approval_never_reaches_the_booking_service(
    attack: Attack,
) -> None:
    run_id = await attack.submit()
    waiting = await attack.until(run_id, lambda c: c.state == CallState.NEEDS_APPROVAL)

    await attack.forge(waiting, "allowed", strip=True)
    call = await attack.until(run_id, _settled)

    assert call.state == CallState.FAILED
    assert _error(call)["code"] == "approval_mismatch"
    assert "needs an approval by events-lead" in _error(call)["message"]
    assert await attack.reserve_requests(run_id) == 0
    assert await attack.approval_state(waiting) == "pending"


async def test_an_executed_approved_call_reset_to_approved_is_sent_once(attack: Attack) -> None:
    run_id = await attack.submit()
    waiting = await attack.until(run_id, lambda c: c.state == CallState.NEEDS_APPROVAL)
    await attack.approve(waiting)
    done = await attack.until(run_id, _settled)
    assert done.state == CallState.SUCCEEDED
    assert await attack.reserve_requests(run_id) == 1

    await attack.forge(done, "approved", strip=False)
    again = await attack.until(run_id, lambda c: _settled(c) and c.attempts > done.attempts)

    assert await attack.reserve_requests(run_id) == 1, "the approved write went out twice"
    assert again.state == CallState.FAILED
    assert "used already" in _error(again)["message"]
    assert await attack.approval_state(waiting) == "consumed"
