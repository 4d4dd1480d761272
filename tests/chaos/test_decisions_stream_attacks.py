"""What an approvers or Slack login can post on a live run's decisions stream — the one stream
of the pipeline those logins may write — on a deployment locked down by its own users.acl,
with every worker a real process logged in as ``workers``:

* a `ValidateRequest` (with ``approval_ttl_s: 1e308``, or naming a call that does not exist)
  is dead-lettered with the reason and fails nothing: the run stays paused on its approval,
  its calls unchanged, and completes once carol approves;
* a forged `ApprovalExpired` does not expire the approval before its time.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.auth.keyring import LocalKeyring
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.desk import ApprovalDesk
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import ApprovalExpired, ValidateRequest, encode, new_id
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.records import CallRecord
from tests.chaos import signoff_tool
from tests.integration.redis_lockdown import OPERATOR, PREFIX, LockedRedis, locked_redis

ROOT = Path(__file__).resolve().parents[2]
LOGINS = ["approvers", "slack", "api"]
"""The logins that may XADD a partition's decisions stream (deploy/redis/users.acl)."""


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedRedis]:
    with locked_redis(tmp_path_factory.mktemp("acl")) as server:
        yield server


@pytest.fixture(scope="module")
def system(locked: LockedRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every worker, logged in as workers; the scripted model asks for one sign-off."""
    scenarios = tmp_path_factory.mktemp("scenarios")
    (scenarios / "sign-off.json").write_bytes(orjson.dumps(signoff_tool.SCENARIO))
    spec = SystemSpec(
        services=(), scripted_model=True, redis_url=locked.url("workers"), key_prefix=PREFIX,
        tool_modules=("tests.chaos.signoff_tool",), scenarios=(scenarios,),
        env={"CALLGATE_CLAIM_IDLE_MS": "400", "PYTHONPATH": str(ROOT)}, grace_s=3.0,
    )  # fmt: skip
    with LocalSystem(spec):
        yield


@dataclass
class Live:
    """A run paused on its sign-off, as the operator (the tests' admin login) reads it."""

    run_id: str
    call: CallRecord
    approval: ApprovalRecord


@asynccontextmanager
async def _ledger(locked: LockedRedis, user: str) -> AsyncIterator[Ledger]:
    settings = Settings(redis_url=locked.url(user), key_prefix=PREFIX, read_block_ms=50)
    redis = aioredis.Redis.from_url(settings.redis_url)
    ledger = Ledger(redis, Keys(PREFIX, settings.partitions), settings)
    try:
        yield ledger
    finally:
        await ledger.aclose()
        await redis.aclose()


async def _live(locked: LockedRedis) -> Live:
    spec = {
        "api": "openai-chat",
        "model": "sign-off",
        "input": "sign it",
        "identity": {"user": "alice"},
        "allowed_tools": ["sign_off"],
        "max_turns": 4,
    }
    async with CallgateClient(locked.settings("submitters")) as client:
        run_id = await client.submit(spec)
    async with CallgateClient(locked.settings(OPERATOR)) as client:
        await client.wait(run_id, 30)
    async with _ledger(locked, OPERATOR) as ledger:
        run, [call] = await ledger.run_and_calls(run_id, ["t1.0"])
        assert run is not None and run.status == "paused_approval", run
        assert call is not None and call.approval_id is not None
        approval = await ledger.get_approval(run_id, call.approval_id)
    assert approval is not None and approval.state == "pending"
    return Live(run_id, call, approval)


async def _post_as(locked: LockedRedis, login: str, run_id: str, data: bytes) -> str:
    """XADD onto the run's decisions stream, logged in as ``login``."""
    redis = aioredis.Redis.from_url(locked.url(login))
    try:
        entry = await redis.xadd(Keys(PREFIX).run_stream("decisions", run_id), {"d": data})
    finally:
        await redis.aclose()
    return entry.decode() if isinstance(entry, bytes) else str(entry)


async def _dead_letter_reason(locked: LockedRedis, run_id: str, data: bytes) -> str:
    keys = Keys(PREFIX)
    dead = keys.dead_letter_for(keys.run_stream("decisions", run_id))
    redis = aioredis.Redis.from_url(locked.url(OPERATOR))
    try:
        for _ in range(400):
            for _, fields in await redis.xrange(dead):
                if fields[b"d"] == data:
                    return str(fields[b"reason"].decode())
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    raise AssertionError(f"never dead-lettered: {data[:100]!r}")


async def _settled(locked: LockedRedis, run_id: str, entry: str) -> None:
    """Wait until the validator's group has read the entry and acked it."""
    stream = Keys(PREFIX).run_stream("decisions", run_id)
    redis = aioredis.Redis.from_url(locked.url(OPERATOR))
    try:
        for _ in range(400):
            groups = {g["name"].decode(): g for g in await redis.xinfo_groups(stream)}
            last = groups["validator"]["last-delivered-id"].decode()
            read = tuple(map(int, last.split("-"))) >= tuple(map(int, entry.split("-")))
            if read and not await redis.xpending_range(stream, "validator", entry, entry, 1):
                return
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    raise AssertionError(f"the validator never settled {entry}")


async def _untouched(locked: LockedRedis, live: Live) -> None:
    """Still paused on the same approval, the call exactly as before, no run.failed."""
    async with _ledger(locked, OPERATOR) as ledger:
        run, [call] = await ledger.run_and_calls(live.run_id, [live.call.call_id])
        approval = await ledger.get_approval(live.run_id, live.approval.approval_id)
        events = await ledger.events(live.run_id)
    assert run is not None and (run.status, run.reason) == (
        "paused_approval",
        "awaiting approval",
    ), run
    assert call == live.call
    assert approval == live.approval
    assert not [e for e in events if e.type == "run.transition" and e.data["to"] == "failed"]


async def _approve_and_complete(locked: LockedRedis, live: Live) -> None:
    """carol approves through the approvers login; the run then completes, signed off once."""
    async with _ledger(locked, "approvers") as ledger:
        desk = ApprovalDesk(ledger.redis, ledger.keys, ledger)
        carol = LocalKeyring(Path(os.environ["CALLGATE_HOME"])).signer("carol")
        await desk.post(live.approval, "approve", carol)
    async with CallgateClient(locked.settings(OPERATOR)) as client:
        for _ in range(400):
            view: dict[str, Any] = await client.view(live.run_id)
            if view["status"] == "completed":
                break
            await asyncio.sleep(0.05)
    assert view["status"] == "completed", view
    assert [c["state"] for c in view["calls"]] == ["succeeded"]
    assert "budget 2027" in view["final_text"]


def _validate_with_ttl(live: Live, approval_ttl_s: float) -> bytes:
    """A validate order for the live turn carrying its own facts: alice's authority, the call
    as recorded, and an approval lifetime no record could hold."""
    run = {
        "identity": {"user": "alice"},
        "allowed_tools": ["sign_off"],
        "batch_policy": "hold_effects",
        "approval_ttl_s": approval_ttl_s,
    }
    call = {
        "call_id": live.call.call_id,
        "index": 0,
        "tool": "sign_off",
        "raw_arguments": live.call.raw_arguments,
    }
    return orjson.dumps(
        {
            "v": 1,
            "msg_id": new_id(),
            "run_id": live.run_id,
            "turn": 1,
            "kind": "validate_request",
            "call_ids": [live.call.call_id],
            "facts": {"run": run, "calls": [call]},
        }
    )


@pytest.mark.parametrize("login", LOGINS)
async def test_a_validate_order_on_the_decisions_stream_fails_no_live_run(
    locked: LockedRedis, system: None, login: str
) -> None:
    live = await _live(locked)
    overflow = _validate_with_ttl(live, 1e308)
    no_call = encode(ValidateRequest(run_id=live.run_id, turn=1, call_ids=("t1.9",)))
    for data in (overflow, no_call):
        await _post_as(locked, login, live.run_id, data)

    # Out of range: it does not decode.  In range but not a decision: not this stream's kind.
    assert "facts.run.approval_ttl_s" in await _dead_letter_reason(locked, live.run_id, overflow)
    reason = await _dead_letter_reason(locked, live.run_id, no_call)
    assert "'validate_request' is not carried on" in reason, reason
    await _untouched(locked, live)
    await _approve_and_complete(locked, live)


@pytest.mark.parametrize("login", LOGINS)
async def test_a_forged_expiry_does_not_expire_a_live_approval(
    locked: LockedRedis, system: None, login: str
) -> None:
    live = await _live(locked)
    forged = ApprovalExpired(
        run_id=live.run_id, turn=1, call_id=live.call.call_id, approval_id=live.approval.approval_id
    )
    entry = await _post_as(locked, login, live.run_id, encode(forged))
    await _settled(locked, live.run_id, entry)

    await _untouched(locked, live)
    await _approve_and_complete(locked, live)
