"""The workers' own delayed work: approval expiry, and the periodic sweeps that back it up.

They run on the internal arq queue (`callgate.jobs.internal_queue_name`), which no submitter
may write.  Each is idempotent and guarded: an expiry is applied by the validator exactly like
a decision (a decided approval is left alone), and a deadline hands a run off only from the
state it was read in.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from callgate.clock import now_ms
from callgate.envelopes import ApprovalExpired
from callgate.logs import log_fields
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.commands import post
from callgate.streams.service import Runtime
from callgate.telemetry import spans

log = logging.getLogger("callgate.ingress")

SWEEP_BATCH = 200
DEADLINE_REACHED = "deadline reached"


async def hand_off_expired(rt: Runtime, run_id: str, now: int) -> bool:
    """Hand off one run whose deadline passed; drop its index entry once it is settled."""
    run = await rt.ledger.get_run(run_id)
    if run is None or run.status in RUN_TERMINAL or run.deadline_ms is None:
        await rt.ledger.apply(rt.ledger.drop_deadline(run_id))
        return False
    if run.deadline_ms > now:
        return False
    # Leaves the index too; guarded on the status just read: a run that moved meanwhile is
    # retried next sweep.
    tx = await rt.ledger.end_run(run, RunState.HANDED_OFF, DEADLINE_REACHED)
    result = await asyncio.shield(rt.ledger.apply(tx))
    if result.ok:
        log.info("run handed off", extra=log_fields(run_id=run_id, reason=DEADLINE_REACHED))
        spans.run_ended(run, RunState.HANDED_OFF)
    return result.ok


async def expire_approval(ctx: dict[str, Any], ref: dict[str, Any]) -> str:
    """The deferred expiry of one approval: hand it to the validator as a message, so expiry
    is applied exactly like a decision (guarded; a decided approval is left alone)."""
    runtime: Runtime = ctx["runtime"]
    message = ApprovalExpired(
        run_id=ref["run_id"],
        turn=ref["turn"],
        call_id=ref["call_id"],
        approval_id=ref["approval_id"],
    )
    await post(runtime.redis, runtime.keys.run_stream("decisions", message.run_id), message)
    return message.approval_id


async def sweep_approvals(ctx: dict[str, Any]) -> int:
    """Periodic backstop for lost ``expire_approval`` jobs: expire every pending approval past
    its time (the validator ignores one that was decided meanwhile), and drop entries whose
    approval no longer waits; returns how many expiries it posted."""
    rt: Runtime = ctx["runtime"]
    posted = 0
    for partition in range(rt.keys.partitions):
        due = await rt.redis.zrangebyscore(
            rt.keys.pending_approvals(partition), "-inf", now_ms(), start=0, num=SWEEP_BATCH
        )
        for raw in due:
            run_id, _, approval_id = _text(raw).partition(" ")
            record = await rt.ledger.get_approval(run_id, approval_id)
            if record is None or record.state != "pending":
                # Else it stays due and crowds live ones out of every batch after this one.
                await rt.ledger.apply(rt.ledger.forget_stale_pending(run_id, approval_id))
                continue
            ref = {
                "run_id": run_id,
                "turn": record.turn,
                "call_id": record.call_id,
                "approval_id": approval_id,
            }
            await expire_approval(ctx, ref)
            posted += 1
    return posted


async def sweep_deadlines(ctx: dict[str, Any]) -> int:
    """Periodic: hand off every non-terminal run past its ``deadline_ms``; returns how many.

    The same sweep drops runs whose retention passed from the runs index (their keys expired
    by themselves; the index is the one thing a finished run leaves that has no TTL)."""
    rt: Runtime = ctx["runtime"]
    now = now_ms()
    handed = 0
    for partition in range(rt.keys.partitions):
        due = await rt.redis.zrangebyscore(
            rt.keys.deadlines(partition), "-inf", now, start=0, num=SWEEP_BATCH
        )
        for raw in due:
            handed += await hand_off_expired(rt, _text(raw), now)
        await rt.ledger.prune_expired_runs(partition, now)
    return handed


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
