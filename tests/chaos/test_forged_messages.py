"""Messages nobody in the loop wrote, XADDed as anyone with Redis write access could, and a model
that floods a turn: a forged order runs nothing and creates nothing, arguments edited after an
approval never reach the booking service, a wrong-kind message fails no live run, and a flood
of tool calls is neither recorded, run nor kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.envelopes import (
    EnvelopeBase,
    ExecRequest,
    TurnRequest,
    ValidateRequest,
    encode,
    new_id,
)
from callgate.facts import (
    DecideFacts,
    DecideRunFacts,
    ExecCallFacts,
    ExecFacts,
    ExecRunFacts,
    ProposedCall,
)
from callgate.ops.chaos.workload import APIS
from callgate.records import CallRecord, Effect
from callgate.states import CallState
from callgate.tools.registry import load_registry
from tests.chaos.conftest import Deployment
from tests.chaos.test_hostile_approvals import pending, signed

TRAVEL = ["callgate.standins.demo.travel"]
WORKSHOP = ["callgate.standins.demo.workshop"]
GROUP = {"exec": "executor", "validate": "validator"}
FLOOD = "flood-2000-calls"
KEPT_BYTES_MAX = 10_000
"""What Redis may hold for any one key of a flooded run (the flood itself is 100s of KB)."""
RAW_KEPT_BYTES_MAX = 2_000


@asynccontextmanager
async def _redis(deployment: Deployment) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def _xadd(deployment: Deployment, kind: str, run_id: str, data: bytes) -> str:
    async with _redis(deployment) as redis:
        entry = await redis.xadd(deployment.keys.run_stream(kind, run_id), {"d": data})
    return entry.decode() if isinstance(entry, bytes) else str(entry)


async def _forge(deployment: Deployment, kind: str, message: EnvelopeBase) -> str:
    return await _xadd(deployment, kind, message.run_id, encode(message))


def _entry(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, seq = text.split("-")
    return int(ms), int(seq)


async def _settled(deployment: Deployment, kind: str, run_id: str, entry_id: str) -> None:
    """Wait until the worker group reading ``kind`` has taken the entry and acked it (handled
    or dead-lettered)."""
    stream, group = deployment.keys.run_stream(kind, run_id), GROUP[kind]
    async with _redis(deployment) as redis:
        for _ in range(600):
            info = {g["name"].decode(): g for g in await redis.xinfo_groups(stream)}
            if group not in info:  # the workers are still starting: they read from "0"
                await asyncio.sleep(0.05)
                continue
            read = _entry(info[group]["last-delivered-id"]) >= _entry(entry_id)
            left = await redis.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
            if read and not left:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{group} never settled {entry_id} on {stream}")


async def _keys_naming(deployment: Deployment, run_id: str) -> list[bytes]:
    async with _redis(deployment) as redis:
        return [key async for key in redis.scan_iter(match=f"*{run_id}*")]


async def _travel_requests(deployment: Deployment) -> int:
    stats = await deployment.http("travel", "GET", "/_stats")
    return sum(int(endpoint["requests"]) for endpoint in stats.values())


async def _booking_requests(deployment: Deployment, run_id: str) -> dict[str, int]:
    found = await deployment.http("booking", "GET", f"/_stats/runs/{run_id}")
    return dict(found["requests"])


def _exec_order(run_id: str, identity: dict[str, Any]) -> ExecRequest:
    tool = load_registry(TRAVEL).get("get_train_status")
    assert tool is not None
    call = ExecCallFacts(
        tool=tool.name,
        tool_version=tool.version,
        effect=Effect.READ,
        arguments={"train_number": "G1234", "date": "2026-12-20"},
    )
    facts = ExecFacts(run=ExecRunFacts(identity=identity), call=call, state=CallState.ALLOWED)
    return ExecRequest(run_id=run_id, turn=1, call_id="t1.0", facts=facts)


def _validate_order(run_id: str, identity: dict[str, Any], participant: str) -> ValidateRequest:
    names = list(load_registry(WORKSHOP).names())
    run = DecideRunFacts(
        identity=identity, allowed_tools=names, batch_policy="run_allowed", approval_ttl_s=None
    )
    raw = orjson.dumps({"event_id": "ws-200", "participant_id": participant}).decode()
    call = ProposedCall(call_id="t1.0", index=0, tool="reserve_seat", raw_arguments=raw)
    facts = DecideFacts(run=run, calls=(call,))
    return ValidateRequest(run_id=run_id, turn=1, call_ids=("t1.0",), facts=facts)


# -- 1. a forged exec order for a run that does not exist --------------------------------------


async def test_a_forged_exec_order_for_no_run_runs_nothing_and_creates_nothing(
    fresh: Deployment,
) -> None:
    run_id = f"run-forged-{new_id()}"
    lead = {"user": "mallory", "roles": ["events-lead", "admin"]}
    entry = await _forge(fresh, "exec", _exec_order(run_id, lead))
    await _settled(fresh, "exec", run_id, entry)

    assert await _travel_requests(fresh) == 0
    assert (await fresh.http("travel", "GET", f"/_stats/runs/{run_id}"))["requests"] == {}
    assert await _keys_naming(fresh, run_id) == []  # no run, call, event log or history


# -- 2. a forged validate order: no run, or a live run with facts the ledger does not hold -----


async def test_a_forged_validate_order_for_no_run_asks_the_booking_service_nothing(
    fresh: Deployment,
) -> None:
    run_id = f"run-forged-{new_id()}"
    entry = await _forge(fresh, "validate", _validate_order(run_id, {"user": "alice"}, "p-alice"))
    await _settled(fresh, "validate", run_id, entry)

    assert await _booking_requests(fresh, run_id) == {}
    stats = await fresh.http("booking", "GET", "/_stats")
    assert stats["requests"] == {} and stats["reserve"]["requests"] == 0
    assert await _keys_naming(fresh, run_id) == []


async def test_a_forged_validate_order_for_a_live_run_decides_nothing(fresh: Deployment) -> None:
    live = await pending(fresh, {"user": "alice"})
    before = await fresh.call(live.run_id, live.call_id)
    asked = await _booking_requests(fresh, live.run_id)  # the genuine precondition checks
    assert asked.get("eligibility", 0) >= 1
    # Another identity, other arguments: a second decision, this time without approval.
    lead = {"user": "bob", "roles": ["events-lead"]}
    entry = await _forge(fresh, "validate", _validate_order(live.run_id, lead, "p-bob"))
    await _settled(fresh, "validate", live.run_id, entry)

    assert await _booking_requests(fresh, live.run_id) == asked
    assert await fresh.call(live.run_id, live.call_id) == before
    assert (await fresh.settle(live.run_id))["status"] == "paused_approval"
    assert (await fresh.http("booking", "GET", "/_stats"))["reserve"]["requests"] == 0


# -- 3. arguments edited between the approval and the dispatch --------------------------------


async def test_arguments_edited_after_approval_never_reach_the_booking_service(
    fresh: Deployment,
) -> None:
    """Only the call record's ``arguments`` change; its ``args_hash`` and the approval's stay
    as they were, so an executor that compared the stored hashes would send the edit."""
    genuine = await pending(fresh, {"user": "alice"})
    tampered = {"event_id": "ws-200", "participant_id": "p-bob"}
    async with _redis(fresh) as redis:
        key = fresh.keys.call(genuine.run_id, genuine.call_id)
        await cast(Awaitable[int], redis.hset(key, "arguments", orjson.dumps(tampered).decode()))
    assert (await fresh.call(genuine.run_id, genuine.call_id)).arguments == tampered

    await fresh.post("decisions", genuine.decision(signed(genuine, "carol")))
    call = await _terminal(fresh, genuine.run_id, genuine.call_id)

    assert call.state == CallState.FAILED
    assert call.result is not None
    assert call.result.model_dump()["error"]["code"] == "approval_mismatch"
    stats = await fresh.http("booking", "GET", "/_stats")
    assert stats["reserve"]["requests"] == 0 and stats["reservations"] == 0
    assert "ws-200/p-bob" not in stats["reservations_by_participant"]
    assert (await fresh.settle(genuine.run_id))["status"] != "paused_approval"


async def _terminal(deployment: Deployment, run_id: str, call_id: str) -> CallRecord:
    for _ in range(600):
        call = await deployment.call(run_id, call_id)
        if call.state in (CallState.SUCCEEDED, CallState.FAILED, CallState.UNKNOWN):
            return call
        await asyncio.sleep(0.05)
    raise AssertionError(f"call {run_id}/{call_id} never ended")


# -- 4. wrong-kind and undecodable messages naming a live run ---------------------------------


async def _dead_letters(deployment: Deployment, kind: str, run_id: str) -> list[bytes]:
    stream = deployment.keys.dead_letter_for(deployment.keys.run_stream(kind, run_id))
    async with _redis(deployment) as redis:
        return [fields[b"d"] for _, fields in await redis.xrange(stream)]


async def _until_dead(deployment: Deployment, kind: str, run_id: str, raw: bytes) -> None:
    for _ in range(600):
        if raw in await _dead_letters(deployment, kind, run_id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not dead-lettered from {kind}: {raw[:80]!r}")


def _misrouted(run_id: str, call_id: str) -> dict[str, list[bytes]]:
    """Per stream, messages bound to the live run's current turn (and call) but of a kind its
    reader does not handle, and bytes that are no message at all."""
    turn = TurnRequest(run_id=run_id, turn=1)
    return {
        "exec": [
            encode(turn),
            encode(ValidateRequest(run_id=run_id, turn=1, call_ids=(call_id,))),
            b"\x00not json " + run_id.encode(),
        ],
        "validate": [
            encode(turn),
            encode(ExecRequest(run_id=run_id, turn=1, call_id=call_id)),
            b'{"kind": "validate_request", "run_id": "' + run_id.encode() + b'"}',
        ],
    }


async def test_a_wrong_kind_message_naming_a_live_run_is_dead_lettered_and_fails_nothing(
    fresh: Deployment,
) -> None:
    live = await pending(fresh, {"user": "alice"})
    before = await fresh.call(live.run_id, live.call_id)
    sent = _misrouted(live.run_id, live.call_id)
    for kind, messages in sent.items():
        for raw in messages:
            await _xadd(fresh, kind, live.run_id, raw)
    for kind, messages in sent.items():
        for raw in messages:
            # The run-failing hook runs before the dead letter is written: it has had its say.
            await _until_dead(fresh, kind, live.run_id, raw)

    view = await fresh.settle(live.run_id)
    assert (view["status"], view["reason"]) == ("paused_approval", "awaiting approval")
    assert await fresh.call(live.run_id, live.call_id) == before
    ends = [e.data for e in await fresh.events(live.run_id) if e.type == "run.transition"]
    assert not [e for e in ends if e["to"] == "failed" or "dead letter" in str(e)]


# -- 5. a model that floods one turn with 2,000 tool calls ------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_a_flood_of_tool_calls_is_not_recorded_run_or_kept(
    fresh: Deployment, api: str
) -> None:
    view = await fresh.run(FLOOD, TRAVEL, api=api)
    run_id = view["run_id"]

    assert view["status"] == "paused_incomplete"
    assert view["reason"].startswith("too many tool calls: 2000"), view["reason"]
    assert view["calls"] == [] and await _travel_requests(fresh) == 0
    async with _redis(fresh) as redis:
        assert await redis.hexists(fresh.keys.run_index(run_id), "t:1") == 0
        assert await redis.exists(fresh.keys.call(run_id, "t1.0")) == 0
        raw = redis.hgetall(fresh.keys.raw_responses(run_id))
        kept = await cast(Awaitable[dict[bytes, bytes]], raw)
        assert kept and sum(len(v) for v in kept.values()) < 1_000, kept
        sizes = {
            key: await redis.memory_usage(key) or 0 for key in await _keys_naming(fresh, run_id)
        }
    assert sizes[fresh.keys.raw_responses(run_id).encode()] < RAW_KEPT_BYTES_MAX, sizes
    assert max(sizes.values()) < KEPT_BYTES_MAX, sizes
    log = await fresh.http("model", "GET", "/_log")
    assert len([e for e in log if e.get("scenario") == FLOOD]) == 1  # asked once, not again
