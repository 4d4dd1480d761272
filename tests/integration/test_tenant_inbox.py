"""A tenant's inbox (issue #31, attack 5): every step that writes or removes an entry of a
partition's inbox indices — pending approvals, unresolved calls — does the same to the run's
tenant's copy, in the same atomic step, against a real Redis.  A tenant's approvers read only
the copy (deploy/redis/acl.sh; the attack itself: tests/integration/test_redis_tenants.py), so
a copy that missed a write would hide an approval from its tenant, and one that missed a removal
would list a decided one forever.

Runs of acme, of globex and of no tenant go through each path side by side: approve, deny,
expire, cancel and end (a dead letter) a pending approval; resolve (applied / not applied),
recheck and prune (its run expired) an unresolved call.  After every step, each tenant's copy
holds exactly the partition index's entries of that tenant's runs, and no other copy exists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import new_id
from callgate.keys import IndexOf, Keys
from callgate.ledger.approval_steps import Decider
from callgate.ledger.store import Ledger
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, Effect, RunRecord
from callgate.states import CallState, RunState

RUNS = {"acme.1": "acme", "globex.1": "globex", "run-plain": None}
TENANTS = ("acme", "globex")
HOUR_MS = 3_600_000
T = TypeVar("T")


@pytest.fixture
async def ledger(settings: Settings, redis: aioredis.Redis) -> AsyncIterator[Ledger]:
    keys = Keys(settings.key_prefix, settings.partitions)
    yield Ledger(redis, keys, settings.model_copy(update={"retention_s": 1}))


def _decider() -> Decider:
    return Decider(person="carol", signer="carol", token="signed", jti=new_id())


def _run(run_id: str, status: RunState) -> RunRecord:
    tenant = RUNS[run_id]
    identity = {"user": "alice"} | ({"tenant": tenant} if tenant else {})
    return RunRecord(
        run_id=run_id,
        api="openai-chat",
        model="m",
        input="hi",
        turn=1,
        status=status,
        identity=identity,
    )


def _call(run_id: str, state: CallState, approval_id: str | None = None) -> CallRecord:
    return CallRecord(
        run_id=run_id,
        call_id="t1.0",
        turn=1,
        index=0,
        provider_call_id="p1",
        tool="reserve_seat",
        tool_version="1",
        effect=Effect.WRITE,
        state=state,
        approval_id=approval_id,
        operation_id=f"op-{run_id}",
    )


async def _start(ledger: Ledger, run: RunRecord, call: CallRecord) -> None:
    tx = ledger.start_run(run, [{"role": "user", "content": "hi"}])
    ledger.create_calls(tx, [call])
    assert (await ledger.apply(tx)).ok


async def _apply(ledger: Ledger, tx: Tx | Awaitable[Tx]) -> None:
    step = tx if isinstance(tx, Tx) else await tx
    assert (await ledger.apply(step)).ok


async def _index(redis: aioredis.Redis, key: str) -> set[str]:
    return {member.decode() for member in await redis.zrange(key, 0, -1)}


async def assert_copies(ledger: Ledger, index_of: IndexOf) -> set[str]:
    """Each tenant's copy of ``index_of`` is the partition index's entries of its runs, and
    no other copy exists (a run of no tenant has none); the partition index's entries."""
    redis = ledger.redis
    whole = await _index(redis, index_of(0, None))
    for tenant in TENANTS:
        mine = {m for m in whole if m.startswith(f"{tenant}.")}
        assert await _index(redis, index_of(0, tenant)) == mine, tenant
    copies = {k.decode() async for k in redis.scan_iter(f"{index_of(0, None)}:*")}
    assert copies <= {index_of(0, tenant) for tenant in TENANTS}, copies
    return whole


async def settle_each(
    ledger: Ledger,
    index_of: IndexOf,
    entries: dict[str, T],
    settle: Callable[[Ledger, T], Awaitable[None]],
) -> None:
    """Every entry is in ``index_of`` and its tenant's copy; settling each, one after the
    other, takes it out of both and leaves the others."""
    left = set(entries)
    assert await assert_copies(ledger, index_of) == left
    for member, item in entries.items():
        await settle(ledger, item)
        left.remove(member)
        assert await assert_copies(ledger, index_of) == left


# ---- pending approvals --------------------------------------------------------------------


async def _pending(ledger: Ledger, run_id: str) -> ApprovalRecord:
    """``run_id`` paused on its one call, which waits for an approval."""
    approval = ApprovalRecord(
        approval_id=f"apr-{run_id}",
        run_id=run_id,
        turn=1,
        call_id="t1.0",
        tool="reserve_seat",
        tool_version="1",
        args_hash="h" * 64,
        arguments="{}",
        requested_by="alice",
        approver_role="events-lead",
        expires_ms=now_ms() + HOUR_MS,
    )
    await _start(
        ledger,
        _run(run_id, RunState.PAUSED_APPROVAL),
        _call(run_id, CallState.NEEDS_APPROVAL, approval.approval_id),
    )
    await _apply(ledger, ledger.request_approval(Tx(), approval, {}))
    return approval


async def _decide(ledger: Ledger, approval: ApprovalRecord, to: CallState) -> None:
    calls = await ledger.turn_calls(approval.run_id, 1)
    decider = None if to == CallState.EXPIRED else _decider()
    await _apply(
        ledger,
        ledger.apply_approval(approval, to, calls, msg_id=new_id(), decider=decider, reason="no"),
    )


async def _approve(ledger: Ledger, approval: ApprovalRecord) -> None:
    await _decide(ledger, approval, CallState.APPROVED)


async def _deny(ledger: Ledger, approval: ApprovalRecord) -> None:
    await _decide(ledger, approval, CallState.DENIED)


async def _expire(ledger: Ledger, approval: ApprovalRecord) -> None:
    await _decide(ledger, approval, CallState.EXPIRED)


async def _cancel(ledger: Ledger, approval: ApprovalRecord) -> None:
    run, calls = await ledger.get_run(approval.run_id), await ledger.turn_calls(approval.run_id, 1)
    assert run is not None
    await _apply(ledger, ledger.cancel_run(run, calls, _decider(), reason=None, msg_id=new_id()))


async def _end(ledger: Ledger, approval: ApprovalRecord) -> None:
    run = await ledger.get_run(approval.run_id)
    assert run is not None
    await _apply(ledger, ledger.end_run(run, RunState.FAILED, "dead letter"))


@pytest.mark.parametrize(
    "settle",
    [_approve, _deny, _expire, _cancel, _end],
    ids=["approve", "deny", "expire", "cancel", "end-run"],
)
async def test_a_tenants_pending_approvals_are_copied_and_removed_with_the_partitions(
    ledger: Ledger, settle: Callable[[Ledger, ApprovalRecord], Awaitable[None]]
) -> None:
    pending = [await _pending(ledger, run_id) for run_id in RUNS]
    entries = {f"{a.run_id} {a.approval_id}": a for a in pending}
    await settle_each(ledger, ledger.keys.pending_approvals, entries, settle)


# ---- unresolved calls ---------------------------------------------------------------------


async def _unresolved(ledger: Ledger, run_id: str) -> CallRecord:
    """``run_id``'s write still unknown after every check: in the inbox, the run paused."""
    run, call = _run(run_id, RunState.EXECUTING), _call(run_id, CallState.RECONCILING)
    await _start(ledger, run, call)
    await _apply(ledger, ledger.unresolved(run, call, pause=True))
    found = await ledger.get_call(run_id, call.call_id)
    assert found is not None and found.state == CallState.UNRESOLVED
    return found


async def _resolve(ledger: Ledger, call: CallRecord, applied: bool) -> None:
    await _apply(
        ledger,
        ledger.resolve_call(
            call, [call], applied=applied, result={}, decider=_decider(), msg_id=new_id()
        ),
    )


async def _applied(ledger: Ledger, call: CallRecord) -> None:
    await _resolve(ledger, call, True)


async def _not_applied(ledger: Ledger, call: CallRecord) -> None:
    await _resolve(ledger, call, False)


async def _recheck(ledger: Ledger, call: CallRecord) -> None:
    await _apply(ledger, ledger.recheck_call(call, [call], decider=_decider(), msg_id=new_id()))


async def _pruned(ledger: Ledger, call: CallRecord) -> None:
    """Its run ended (cancelled, the call still unresolved) and its keys expired."""
    keys, redis = ledger.keys, ledger.redis
    member = f"{call.run_id} {call.call_id}"
    await redis.zadd(keys.unresolved_calls(0), {member: now_ms() - 10_000}, xx=True)
    await redis.delete(keys.run(call.run_id), keys.call(call.run_id, call.call_id))
    await ledger.prune_expired_runs(0, now_ms())


@pytest.mark.parametrize(
    "settle",
    [_applied, _not_applied, _recheck, _pruned],
    ids=["applied", "not-applied", "recheck", "pruned"],
)
async def test_a_tenants_unresolved_calls_are_copied_and_removed_with_the_partitions(
    ledger: Ledger, settle: Callable[[Ledger, CallRecord], Awaitable[None]]
) -> None:
    calls = [await _unresolved(ledger, run_id) for run_id in RUNS]
    entries = {f"{c.run_id} {c.call_id}": c for c in calls}
    await settle_each(ledger, ledger.keys.unresolved_calls, entries, settle)
