"""Stranded calls (issue 28) against a real Redis, the ledger state built by the ledger's own
steps with the one clock turned back (`callgate.clock.use_clock`): a call a worker owes a move
and has not made within its timeouts is listed, by `find_stranded` and by `callgate doctor`
(exit 1, one BAD line naming it); a call waiting for a person, a fresh one, and the calls of an
ended run are not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis.asyncio as aioredis

from callgate.clock import now_ms, use_clock
from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.keys import Keys
from callgate.ledger.store import Ledger, Tx
from callgate.ops.cli import main
from callgate.ops.stack import WORKERS
from callgate.ops.stranded import find_stranded
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState, RunState
from callgate.streams.upkeep import announce

C, R = CallState, RunState
HOUR_MS = 3_600_000


@pytest.fixture
def ledger(redis: aioredis.Redis, settings: Settings) -> Ledger:
    return Ledger(redis, Keys(settings.key_prefix, settings.partitions), settings)


@contextmanager
def ago(ms: int) -> Iterator[int]:
    """The steps taken inside are stamped ``ms`` in the past (the moment is yielded)."""
    moment = now_ms() - ms
    use_clock(lambda: moment)
    try:
        yield moment
    finally:
        use_clock(None)


async def _apply(ledger: Ledger, tx: Tx) -> None:
    assert (await ledger.apply(tx)).ok, tx


async def _start(ledger: Ledger, run_id: str, status: RunState, *calls: CallRecord) -> RunRecord:
    """A run at turn 1 in ``status`` with ``calls`` (all ``requested``) made by its one step."""
    stamp = now_ms()
    run = RunRecord(run_id=run_id, api="openai-responses", model="m", input="hi", turn=1,
                    status=status, created_ms=stamp, updated_ms=stamp)  # fmt: skip
    await _apply(ledger, ledger.create_calls(ledger.start_run(run, []), list(calls)))
    return run


def _call(run_id: str, index: int, tool: str, effect: str, **kw: object) -> CallRecord:
    return CallRecord(
        run_id=run_id, call_id=f"t1.{index}", turn=1, index=index, tool=tool,
        provider_call_id=f"p{index}", effect=effect, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


async def _move(ledger: Ledger, run_id: str, call_id: str, *states: CallState) -> None:
    """Walk the call through ``states``, one guarded transition each."""
    for before, after in zip((C.REQUESTED, *states), states, strict=False):
        await _apply(ledger, ledger.call_transition(Tx(), run_id, call_id, before, after))


async def _stuck_read(ledger: Ledger, run_id: str, taken_ms_ago: int) -> int:
    """A live run whose read was taken ``taken_ms_ago`` and never settled; when it was."""
    with ago(taken_ms_ago) as taken:
        await _start(ledger, run_id, R.EXECUTING, _call(run_id, 0, "check_seats", "read"))
        await _move(ledger, run_id, "t1.0", C.ALLOWED, C.EXECUTING)
    return taken


async def test_a_call_left_executing_past_its_timeouts_is_listed(
    ledger: Ledger, settings: Settings
) -> None:
    taken = await _stuck_read(ledger, "run-stuck", HOUR_MS)
    # max_deliveries × (check_seats' 2 s timeout + two claim windows of 300 ms)
    limit = settings.max_deliveries * (2_000 + 2 * settings.claim_idle_ms)
    assert (await find_stranded(ledger, now=taken + limit)).calls == []
    [found] = (await find_stranded(ledger, now=taken + limit + 1)).calls
    assert (found.run_id, found.call_id, found.tool, found.state) == (
        "run-stuck", "t1.0", "check_seats", C.EXECUTING)  # fmt: skip
    assert found.limit_ms == limit
    [now] = (await find_stranded(ledger)).calls
    assert now.age_ms >= HOUR_MS and now.line().startswith(
        "stranded call run-stuck/t1.0: check_seats executing for 3600 s")  # fmt: skip


def _doctor_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", ",".join(settings.tool_modules))
    monkeypatch.setenv("CALLGATE_CLAIM_IDLE_MS", str(settings.claim_idle_ms))


async def _doctor(redis: aioredis.Redis, settings: Settings) -> int:
    """`callgate doctor` (its own event loop, in a thread) with every worker kind alive."""
    keys = Keys(settings.key_prefix)
    alive = [asyncio.create_task(announce(redis, keys.consumers(k), f"{k}-1")) for k in WORKERS]
    try:
        await asyncio.sleep(0.1)
        return await asyncio.to_thread(main, ["doctor"])
    finally:
        for task in alive:
            task.cancel()


async def test_callgate_doctor_fails_naming_the_stranded_call(
    ledger: Ledger, redis: aioredis.Redis, settings: Settings,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _doctor_env(monkeypatch, settings)
    await _stuck_read(ledger, "run-fresh", 0)
    assert await _doctor(redis, settings) == 0, capsys.readouterr()
    assert "ok  no stranded calls (1 live run)" in capsys.readouterr().out
    await _stuck_read(ledger, "run-stuck", HOUR_MS)
    assert await _doctor(redis, settings) == 1
    bad = [line for line in capsys.readouterr().err.splitlines() if line.startswith("BAD")]
    assert len(bad) == 1 and bad[0].startswith(
        "BAD stranded call run-stuck/t1.0: check_seats executing for 36"), bad  # fmt: skip


async def _paused_on_approval(ledger: Ledger, run_id: str) -> None:
    """A batch of three: a write waiting for an approval, a write the batch holds for it, and a
    read that was let run at once but whose executor never took it."""
    approval = ApprovalRecord(
        approval_id="apr-1", run_id=run_id, turn=1, call_id="t1.0", tool="reserve_seat",
        tool_version="1", args_hash="h" * 64, arguments="{}", requested_by="alice",
        approver_role="events-lead", expires_ms=now_ms() + 2 * HOUR_MS,
    )  # fmt: skip
    await _start(ledger, run_id, R.PAUSED_APPROVAL,
                 _call(run_id, 0, "reserve_seat", "write", resource_key="ws-1"),
                 _call(run_id, 1, "send_postcard", "write", resource_key="pc"),
                 _call(run_id, 2, "check_seats", "read"))  # fmt: skip
    tx = ledger.call_transition(Tx(), run_id, "t1.0", C.REQUESTED, C.NEEDS_APPROVAL,
                                fields={"approval_id": approval.approval_id})  # fmt: skip
    await _apply(ledger, ledger.request_approval(tx, approval, {}))
    await _move(ledger, run_id, "t1.1", C.ALLOWED)
    await _move(ledger, run_id, "t1.2", C.ALLOWED)


async def _paused_on_unknown_outcome(ledger: Ledger, run_id: str) -> None:
    """A write whose outcome stayed unknown, in a person's inbox, and the write on the same
    resource chained behind it."""
    await _start(ledger, run_id, R.PAUSED_UNKNOWN_OUTCOME,
                 _call(run_id, 0, "reserve_seat", "write", resource_key="ws-1"),
                 _call(run_id, 1, "reserve_seat", "write", resource_key="ws-1"))  # fmt: skip
    await _move(ledger, run_id, "t1.0", C.ALLOWED, C.EXECUTING, C.UNKNOWN, C.RECONCILING)
    await _move(ledger, run_id, "t1.1", C.ALLOWED)
    run, [call] = await ledger.run_and_calls(run_id, ["t1.0"])
    assert run is not None and call is not None
    await _apply(ledger, ledger.unresolved(run, call, pause=False))


async def test_calls_waiting_for_a_person_fresh_ones_and_ended_runs_are_not_listed(
    ledger: Ledger,
) -> None:
    with ago(HOUR_MS):
        await _paused_on_approval(ledger, "run-approval")
        await _paused_on_unknown_outcome(ledger, "run-unknown")
        await _stuck_read(ledger, "run-ended", 0)
    ended = await ledger.get_run("run-ended")
    assert ended is not None
    await _apply(ledger, await ledger.end_run(ended, R.FAILED, "dead letter: poison"))
    await _stuck_read(ledger, "run-fresh", 1_000)
    scan = await find_stranded(ledger)
    # Only the read the paused batch let run, which no executor took in an hour.
    assert [(s.run_id, s.call_id, s.state) for s in scan.calls] == [
        ("run-approval", "t1.2", C.ALLOWED)]  # fmt: skip
    assert scan.live_runs == 3
