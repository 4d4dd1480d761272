"""ingress worker (arq): turns a ``start_run`` job into a run record and its first turn request.

arq carries what streams do not do well: the job other services enqueue (JSON, never pickle,
see `callgate.jobs`), delayed work and periodic sweeps.  arq is at-least-once and its job-id
dedup lasts only while a result is kept, so creating a run is the ledger's create-once step:
the run record, its first history item, its deadline entry and ``TurnRequest(turn=1)`` on the
turns stream land in one guarded atomic step, and a second start of the same run id is a
no-op however it arrives.

``python -m callgate.services.ingress [--burst]``; SIGTERM/SIGINT let a running job finish for up to
``shutdown_grace_s`` (arq's ``job_completion_wait``), then stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from arq import Retry
from arq.cron import cron
from arq.worker import Worker, func

from callgate import eventloop
from callgate.approvals.expiry import EXPIRE_APPROVAL
from callgate.config import Settings
from callgate.crashpoints import crash_point
from callgate.envelopes import ApprovalExpired, TurnRequest, encode
from callgate.errors import CallgateError
from callgate.jobs import START_RUN, job_deserializer, job_serializer, queue_name, redis_settings
from callgate.keys import Keys
from callgate.ledger.store import now_ms
from callgate.ledger.tx import Tx
from callgate.logs import log_fields, setup_logging
from callgate.providers import get_adapter
from callgate.runspec import RunSpecError, parse_spec, to_run_record
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.commands import REDIS_ERRORS, backoff_s
from callgate.streams.service import Runtime, build_runtime, tune_gc
from callgate.tools.contract import load_registry

log = logging.getLogger("callgate.ingress")

SWEEP_EVERY_S = 10
JOB_TIMEOUT_S = 10
"""Every ingress job is a few Redis round trips.  arq lets another worker take the job of a
worker that died only after the longest job timeout + 10 s, so this bounds how long a
SIGKILLed ingress delays the runs it was starting (with 60 s it was 70 s)."""
SWEEP_BATCH = 200
DEADLINE_REACHED = "deadline reached"


def deadlines_index(keys: Keys, partition: int) -> str:
    """Sorted set of the partition's run ids by ``deadline_ms``, in the partition's slot.

    Same slot as the run, so the entry is written in the run's create-once step.
    """
    return keys.deadlines(partition)


# -- start_run -------------------------------------------------------------------------------


def _check_tools(tool_modules: Sequence[str], allowed: Sequence[str] | None) -> None:
    """Fail the spec now, with a clear reason, if its tools would fail every turn later."""
    try:
        registry = load_registry(tool_modules)
    except (ImportError, ValueError, TypeError) as exc:
        raise RunSpecError([f"tool_modules: {exc}"]) from exc
    missing = registry.unknown(allowed or ())
    if missing:
        raise RunSpecError([f"allowed_tools: not in tool_modules: {', '.join(missing)}"])


async def start_run(ctx: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Create the run once: record, first history item, deadline entry, turn-1 request.

    The run id is the spec's, else the arq job id (so a foreign client that only sets the job
    id still gets one run per job).  Returns ``{"run_id", "created"}``; ``created`` is False
    when the run existed already.
    """
    rt: Runtime = ctx["runtime"]
    parsed = parse_spec(spec)
    run_id = parsed.run_id or str(ctx.get("job_id") or "")
    if parsed.run_id is None:
        parsed = parse_spec({**spec, "run_id": run_id})
    _check_tools(parsed.tool_modules, parsed.allowed_tools)
    run = to_run_record(parsed, now_ms())
    turn_1 = TurnRequest(run_id=run_id, turn=1, reason="start")
    tx = rt.ledger.new_run(run, outbox=[(rt.keys.run_stream("turns", run_id), turn_1)])
    rt.ledger.append_history(tx, run_id, get_adapter(run.api).initial_history(run.input))
    if run.deadline_ms is not None:
        index = deadlines_index(rt.keys, rt.keys.partition(run_id))
        tx.zadd(index, {run_id: float(run.deadline_ms)})
    try:
        # Shielded: a shutdown must not abandon the one write that makes the run exist.
        result = await asyncio.shield(rt.ledger.apply(tx))
    except CallgateError as exc:
        if exc.retryable:
            raise Retry(defer=1.0) from exc
        raise
    if result.ok:
        crash_point("ingress.after_create")
    log.info("run started" if result.ok else "run exists already",
             extra=log_fields(run_id=run_id, api=run.api, model=run.model))
    return {"run_id": run_id, "created": result.ok}


# -- deadline sweep --------------------------------------------------------------------------


async def hand_off_expired(rt: Runtime, run_id: str, now: int) -> bool:
    """Hand off one run whose deadline passed; drop its index entry once it is settled."""
    index = deadlines_index(rt.keys, rt.keys.partition(run_id))
    run = await rt.ledger.get_run(run_id)
    if run is None or run.status in RUN_TERMINAL or run.deadline_ms is None:
        await rt.redis.zrem(index, run_id)
        return False
    if run.deadline_ms > now:
        return False
    tx = rt.ledger.run_transition(
        Tx(), run_id, run.status, RunState.HANDED_OFF, fields={"reason": DEADLINE_REACHED}
    )
    await rt.ledger.expire_finished(tx, run_id, run.turn)  # leaves the index too
    # Guarded on the status just read: a run that moved meanwhile is retried next sweep.
    result = await asyncio.shield(rt.ledger.apply(tx))
    if result.ok:
        log.info("run handed off", extra=log_fields(run_id=run_id, reason=DEADLINE_REACHED))
    return result.ok


async def expire_approval(ctx: dict[str, Any], ref: dict[str, Any]) -> str:
    """The deferred expiry of one approval: hand it to the validator as a message, so expiry
    is applied exactly like a decision (guarded; a decided approval is left alone)."""
    runtime: Runtime = ctx["runtime"]
    message = ApprovalExpired(
        run_id=ref["run_id"], turn=ref["turn"], call_id=ref["call_id"],
        approval_id=ref["approval_id"],
    )
    stream = runtime.keys.run_stream("approvals", message.run_id)
    await runtime.redis.xadd(stream, {"d": encode(message)})
    return message.approval_id


async def sweep_approvals(ctx: dict[str, Any]) -> int:
    """Periodic backstop for lost ``expire_approval`` jobs: expire every pending approval past
    its time (the validator ignores one that was decided meanwhile); returns how many."""
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
                continue
            ref = {"run_id": run_id, "turn": record.turn, "call_id": record.call_id,
                   "approval_id": approval_id}
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
            deadlines_index(rt.keys, partition), "-inf", now, start=0, num=SWEEP_BATCH
        )
        for raw in due:
            handed += await hand_off_expired(rt, _text(raw), now)
        await rt.ledger.prune_expired_runs(partition, now)
    return handed


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


# -- the worker ------------------------------------------------------------------------------


def create_worker(
    settings: Settings, *, burst: bool = False, handle_signals: bool = True
) -> Worker:
    """The arq worker for ``settings``: JSON jobs, prefixed queue, and (unless ``burst``) the
    deadline and approval-expiry sweeps every `SWEEP_EVERY_S`."""

    async def on_startup(ctx: dict[str, Any]) -> None:
        ctx["runtime"] = build_runtime("ingress", settings)

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        runtime: Runtime | None = ctx.pop("runtime", None)
        if runtime is not None:
            await runtime.close()

    sweeps = [
        cron(
            sweep,
            name=sweep.__name__,
            second=set(range(offset_s, 60, SWEEP_EVERY_S)),
            job_id=f"cron:{settings.key_prefix}:{sweep.__name__}",
            run_at_startup=True,
            timeout=JOB_TIMEOUT_S,
        )
        for offset_s, sweep in enumerate((sweep_deadlines, sweep_approvals))
    ]
    return Worker(
        functions=[
            func(start_run, name=START_RUN),
            func(expire_approval, name=EXPIRE_APPROVAL),
        ],
        # Sweeps are for a serving worker: in burst mode one falling due mid-drain would add a
        # job nobody queued.
        cron_jobs=[] if burst else sweeps,
        queue_name=queue_name(settings),
        redis_settings=redis_settings(settings),
        burst=burst,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        handle_signals=handle_signals,
        job_completion_wait=max(1, round(settings.shutdown_grace_s)),
        job_timeout=JOB_TIMEOUT_S,
        poll_delay=0.05 if burst else 0.2,
        job_serializer=job_serializer,
        job_deserializer=job_deserializer,
        log_results=False,
        # arq's default hour, but never longer than the run itself is kept (retention).
        keep_result=min(3600, settings.retention_s),
    )


async def serve(settings: Settings, *, burst: bool = False) -> Worker:
    """Run the worker until drained (burst) or stopped by a signal; always close it.

    When Redis goes away, arq's poll loop ends with a connection error; the worker is then
    built again after a back-off, so the process reconnects in place like the stream workers
    instead of exiting (a SIGTERM during the back-off still stops it)."""
    stopped = asyncio.Event()
    attempt = 0
    while True:
        worker = create_worker(settings, burst=burst)
        worker.on_stop = lambda _signal: stopped.set()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await worker.async_run()
            return worker
        except REDIS_ERRORS as exc:
            log.warning("redis unavailable; restarting the arq worker in place",
                        extra=log_fields(error=repr(exc), attempt=attempt))  # fmt: skip
        finally:
            with contextlib.suppress(*REDIS_ERRORS):
                await worker.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), backoff_s(attempt))
        if stopped.is_set():
            return worker
        attempt += 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m callgate.services.ingress")
    parser.add_argument("--burst", action="store_true", help="run queued jobs, then exit")
    args = parser.parse_args(argv)
    setup_logging("ingress")
    tune_gc()
    eventloop.run(serve(Settings(), burst=args.burst))


if __name__ == "__main__":
    main()
