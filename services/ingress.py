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
from callgate.clock import now_ms
from callgate.config import Settings
from callgate.crashpoints import crash_point
from callgate.envelopes import ApprovalExpired
from callgate.errors import CallgateError, RunSpecError
from callgate.jobs import START_RUN, job_deserializer, job_serializer, queue_name, redis_settings
from callgate.logs import log_fields, setup_logging
from callgate.providers import get_adapter
from callgate.runspec import RunSpec, parse_spec, to_run_record
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.commands import REDIS_ERRORS, backoff_s, post
from callgate.streams.service import Runtime, build_runtime, tune_gc
from callgate.tools.registry import ToolRegistry

log = logging.getLogger("callgate.ingress")

SWEEP_EVERY_S = 10
JOB_TIMEOUT_S = 10
"""Every ingress job is a few Redis round trips.  arq lets another worker take the job of a
worker that died only after the longest job timeout + 10 s, so this bounds how long a
SIGKILLed ingress delays the runs it was starting (with 60 s it was 70 s)."""
SWEEP_BATCH = 200
DEADLINE_REACHED = "deadline reached"


# -- start_run -------------------------------------------------------------------------------


def _selected_tools(registry: ToolRegistry, spec: RunSpec) -> list[str]:
    """The registered tools the run may use; the spec may only select among them."""
    if spec.allowed_tools is None:
        return list(registry.names())
    missing = registry.unknown(spec.allowed_tools)
    if missing:
        raise RunSpecError([f"allowed_tools: {', '.join(missing)} not registered in this "
                            f"deployment (registered: {registry.describe()})"])
    validator = (spec.acceptance or {}).get("validator")
    if validator is not None and validator not in registry.validators:
        known = ", ".join(sorted(registry.validators)) or "none"
        raise RunSpecError([f"acceptance.validator: {validator!r} is not a registered "
                            f"validator (registered: {known})"])
    return list(dict.fromkeys(spec.allowed_tools))


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
    run = to_run_record(parsed, now_ms(), _selected_tools(rt.registry, parsed))
    tx = rt.ledger.start_run(run, get_adapter(run.api).initial_history(run.input))
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
    return result.ok


async def expire_approval(ctx: dict[str, Any], ref: dict[str, Any]) -> str:
    """The deferred expiry of one approval: hand it to the validator as a message, so expiry
    is applied exactly like a decision (guarded; a decided approval is left alone)."""
    runtime: Runtime = ctx["runtime"]
    message = ApprovalExpired(
        run_id=ref["run_id"], turn=ref["turn"], call_id=ref["call_id"],
        approval_id=ref["approval_id"],
    )
    await post(runtime.redis, runtime.keys.run_stream("approvals", message.run_id), message)
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
            rt.keys.deadlines(partition), "-inf", now, start=0, num=SWEEP_BATCH
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
