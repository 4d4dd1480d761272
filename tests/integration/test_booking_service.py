"""The booking service as a real process, driven through the workshop tools over loopback.

What it shows: the service is the authority recovery can ask — a write whose answer was
lost raises a transport error (never a `ToolError`), and `reconcile` then finds the
effect by operation id, or its absence, or stays unknown when the service cannot say.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from callgate.errors import ToolError
from callgate.standins.demo.http import ServiceProcess, launch
from callgate.standins.demo.workshop import (
    BOOKING_URL_SETTING,
    ParticipantArgs,
    SeatsArgs,
    check_eligibility,
    check_seats,
    reserve_seat,
)
from callgate.tools.contract import Identity, ToolContext
from callgate.tools.policy import check_preconditions
from tests.integration.helpers import reset_session

pytestmark = pytest.mark.timeout(30)
MODULE = "callgate.standins.demo.booking_service"
ALICE = ParticipantArgs(event_id="ws-101", participant_id="p-alice")
BOB = ParticipantArgs(event_id="ws-101", participant_id="p-bob")
CAROL = ParticipantArgs(event_id="ws-101", participant_id="p-carol")


@pytest.fixture(scope="module")
def booking() -> Iterator[ServiceProcess]:
    with launch(MODULE) as service:
        yield service


@pytest.fixture
async def session(booking: ServiceProcess) -> AsyncIterator[aiohttp.ClientSession]:
    async with reset_session(booking, aiohttp.ClientTimeout(total=5)) as client:
        yield client


def _ctx(session: aiohttp.ClientSession, url: str, user: str = "alice") -> ToolContext:
    return ToolContext(
        run_id="run-1", call_id="call-1", turn=1, identity=Identity(user=user),
        session=session, config={BOOKING_URL_SETTING: url},
    )  # fmt: skip


async def _faults(session: aiohttp.ClientSession, url: str, faults: dict[str, Any]) -> None:
    async with session.post(f"{url}/_faults", json=faults) as resp:
        assert resp.status == 200, await resp.text()


async def _stats(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/_stats") as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def test_same_operation_twice_makes_one_reservation(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    first = await reserve_seat.execute(ctx, ALICE, "op-1")
    again = await reserve_seat.execute(ctx, ALICE, "op-1")
    assert first == again
    assert first["operation_id"] == "op-1" and first["status"] == "confirmed"
    stats = await _stats(session, booking.url)
    assert stats["reserve"]["requests"] == 2
    assert stats["reserve"]["created"] == 1
    assert stats["reserve"]["requests_by_operation"] == {"op-1": 2}
    assert stats["reserve"]["created_by_operation"] == {"op-1": 1}
    assert stats["reservations_by_participant"] == {"ws-101/p-alice": 1}
    seats = await check_seats.execute(ctx, SeatsArgs(event_id="ws-101"), "op-read")
    assert seats == {"event_id": "ws-101", "capacity": 2, "reserved": 1, "available": 1}


async def test_the_operation_id_travels_as_the_idempotency_key_header(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    assert ctx.idempotency_headers("op-key") == {"Idempotency-Key": "op-key"}
    assert ctx.idempotency_headers("") == {}  # a read's empty id is never a key
    made = await reserve_seat.execute(ctx, ALICE, "op-key")
    assert made["operation_id"] == "op-key"  # the tool's body carries no id: the header did
    stats = await _stats(session, booking.url)
    assert stats["reserve"]["idempotency_keys"] == {"op-key": 1}
    url, body = f"{booking.url}/reservations", {"event_id": "ws-101", "participant_id": "p-bob"}
    replay = {**body, "operation_id": "op-other"}  # a key reused for another operation
    async with session.post(url, json=replay, headers={"Idempotency-Key": "op-key"}) as resp:
        assert resp.status == 422 and (await resp.json())["code"] == "operation_conflict"
    async with session.post(url, json=body) as resp:
        assert resp.status == 400  # no operation id anywhere: nothing is made
    assert (await _stats(session, booking.url))["reservations"] == 1


async def test_commit_then_drop_is_a_transport_error_that_reconciles_applied(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    await _faults(session, booking.url, {"reserve": {"mode": "commit_then_drop", "count": 1}})
    with pytest.raises(aiohttp.ClientError) as caught:
        await reserve_seat.execute(ctx, ALICE, "op-drop")
    assert not isinstance(caught.value, ToolError)
    assert reserve_seat.reconcile is not None
    answer = await reserve_seat.reconcile(ctx, ALICE, "op-drop")
    assert answer.found == "applied"
    assert answer.result is not None and answer.result["operation_id"] == "op-drop"
    stats = await _stats(session, booking.url)
    assert stats["reservations"] == 1
    assert stats["reserve"]["created_by_operation"] == {"op-drop": 1}


async def test_unreachable_reconciles_not_applied(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    await _faults(session, booking.url, {"reserve": {"mode": "unreachable", "count": 1}})
    with pytest.raises(aiohttp.ClientError):
        await reserve_seat.execute(ctx, ALICE, "op-lost")
    assert reserve_seat.reconcile is not None
    assert (await reserve_seat.reconcile(ctx, ALICE, "op-lost")).found == "not_applied"
    stats = await _stats(session, booking.url)
    assert stats["reserve"]["requests"] == 1 and stats["reserve"]["created"] == 0


async def test_lookup_unknown_keeps_reconciliation_inconclusive(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    await reserve_seat.execute(ctx, ALICE, "op-u")
    await _faults(session, booking.url, {"lookup": {"mode": "lookup_unknown", "count": 1}})
    assert reserve_seat.reconcile is not None
    unknown = await reserve_seat.reconcile(ctx, ALICE, "op-u")
    assert unknown.found == "unknown" and unknown.result is None
    assert (await reserve_seat.reconcile(ctx, ALICE, "op-u")).found == "applied"


async def test_reconcile_unknown_when_service_is_down(session: aiohttp.ClientSession) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = _ctx(session, f"http://127.0.0.1:{port}")
    assert reserve_seat.reconcile is not None
    assert (await reserve_seat.reconcile(ctx, ALICE, "op-x")).found == "unknown"
    with pytest.raises(aiohttp.ClientError):
        await reserve_seat.execute(ctx, ALICE, "op-x")


async def test_slow_commit_before_vs_after_the_callers_timeout(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    assert reserve_seat.reconcile is not None
    slow = {"mode": "slow", "delay_s": 0.5, "count": 1}
    await _faults(session, booking.url, {"reserve": {**slow, "commit": "before"}})
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reserve_seat.execute(ctx, ALICE, "op-before"), 0.15)
    assert (await reserve_seat.reconcile(ctx, ALICE, "op-before")).found == "applied"

    await _faults(session, booking.url, {"reserve": {**slow, "commit": "after"}})
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reserve_seat.execute(ctx, BOB, "op-after"), 0.15)
    # Not there yet — and then it is: why "not found" right after a timeout needs back-off.
    assert (await reserve_seat.reconcile(ctx, BOB, "op-after")).found == "not_applied"
    await asyncio.sleep(0.6)
    assert (await reserve_seat.reconcile(ctx, BOB, "op-after")).found == "applied"
    assert (await _stats(session, booking.url))["reservations"] == 2


async def test_seats_run_out(booking: ServiceProcess, session: aiohttp.ClientSession) -> None:
    ctx = _ctx(session, booking.url, user="lead")
    await reserve_seat.execute(ctx, ALICE, "op-a")
    await reserve_seat.execute(ctx, BOB, "op-b")
    with pytest.raises(ToolError, match="no seats left") as caught:
        await reserve_seat.execute(ctx, ALICE, "op-c")
    assert caught.value.code == "no_seats"
    failed = await check_preconditions(reserve_seat, ctx, ALICE)
    assert failed is not None and failed.code == "precondition_failed"
    assert "no seats left" in failed.message
    assert (await _stats(session, booking.url))["reservations"] == 2


async def test_preconditions_refuse_an_ineligible_participant(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    assert await check_preconditions(reserve_seat, ctx, ALICE) is None
    failed = await check_preconditions(reserve_seat, ctx, CAROL)
    assert failed is not None and failed.code == "precondition_failed"
    assert "not eligible" in failed.message
    answer = await check_eligibility.execute(ctx, CAROL, "op-r")
    assert answer["eligible"] is False
    # The service enforces it too, should a call get past the check.
    with pytest.raises(ToolError, match="prerequisite") as caught:
        await reserve_seat.execute(ctx, CAROL, "op-carol")
    assert caught.value.code == "not_eligible"
    unknown_event = ParticipantArgs(event_id="ws-999", participant_id="p-alice")
    failed = await check_preconditions(reserve_seat, ctx, unknown_event)
    assert failed is not None and failed.message == "no such event"


async def test_reject_fault_is_a_tool_error_with_the_service_message(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    reject = {"mode": "reject", "status": 422, "message": "workshop is frozen", "count": 1}
    await _faults(session, booking.url, {"reserve": reject})
    with pytest.raises(ToolError, match="workshop is frozen"):
        await reserve_seat.execute(ctx, ALICE, "op-r")
    assert (await reserve_seat.execute(ctx, ALICE, "op-r"))["status"] == "confirmed"


async def test_seeded_chaos_is_reproducible(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    ctx = _ctx(session, booking.url)
    await reserve_seat.execute(ctx, ALICE, "op-chaos")
    assert reserve_seat.reconcile is not None
    chaos = {"lookup": {"mode": "lookup_unknown", "probability": 0.5, "seed": 7}}
    patterns = []
    for _ in range(2):
        await _faults(session, booking.url, chaos)
        answers = [await reserve_seat.reconcile(ctx, ALICE, "op-chaos") for _ in range(20)]
        patterns.append([a.found for a in answers])
    assert patterns[0] == patterns[1]
    assert set(patterns[0]) == {"applied", "unknown"}


async def test_bad_fault_is_refused(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    bad = {"lookup": {"mode": "commit_then_drop"}, "reserve": {"mode": "slow"}}
    async with session.post(f"{booking.url}/_faults", json=bad) as resp:
        assert resp.status == 400
    async with session.get(f"{booking.url}/_faults") as resp:
        assert await resp.json() == {}  # nothing armed, not even the valid half


async def test_state_file_keeps_reservations_across_a_restart(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    state = tmp_path / "booking.json"
    with launch(MODULE, args=["--state", str(state)]) as first:
        ctx = _ctx(session, first.url)
        made = await reserve_seat.execute(ctx, ALICE, "op-keep")
    with launch(MODULE, args=["--state", str(state)]) as second:
        ctx = _ctx(session, second.url)
        assert reserve_seat.reconcile is not None
        answer = await reserve_seat.reconcile(ctx, ALICE, "op-keep")
        assert answer.found == "applied" and answer.result == made
        seats = await check_seats.execute(ctx, SeatsArgs(event_id="ws-101"), "op-read")
        assert seats["available"] == 1
        assert (await _stats(session, second.url))["reserve"]["created"] == 1


async def test_counts_per_run_and_faults_scoped_to_one_run(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    def ctx(run_id: str) -> ToolContext:
        return ToolContext(
            run_id=run_id, call_id="c1", turn=1, identity=Identity(user="alice"),
            session=session, config={BOOKING_URL_SETTING: booking.url},
        )  # fmt: skip

    drop = {"reserve": {"mode": "commit_then_drop", "count": 1}}
    async with session.post(f"{booking.url}/_faults?run_id=run-a", json=drop) as resp:
        assert resp.status == 200
    with pytest.raises(aiohttp.ClientError):
        await reserve_seat.execute(ctx("run-a"), ALICE, "op-a")
    # Run b meets no fault, although it reserves after run a armed one.
    assert (await reserve_seat.execute(ctx("run-b"), BOB, "op-b"))["status"] == "confirmed"
    await check_preconditions(reserve_seat, ctx("run-b"), BOB)

    async def of(run_id: str) -> Any:
        async with session.get(f"{booking.url}/_stats/runs/{run_id}") as resp:
            return await resp.json()

    assert await of("run-a") == {"requests": {"reserve": 1}, "created": 1}
    assert await of("run-b") == {
        "requests": {"reserve": 1, "eligibility": 1, "seats": 1}, "created": 1,
    }  # fmt: skip
    async with session.get(f"{booking.url}/_faults?run_id=run-a") as resp:
        assert await resp.json() == {}  # used up


async def test_the_full_workshop_fails_its_precondition(
    booking: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    full = ParticipantArgs(event_id="ws-102", participant_id="p-alice")
    failed = await check_preconditions(reserve_seat, _ctx(session, booking.url), full)
    assert failed is not None and failed.message == "no seats left for ws-102"
