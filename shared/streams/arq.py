"""The one way callgate runs arq workers: JSON jobs, bounded in time, reconnecting in place.

A process may serve several queues (the ingress serves the public ``start_run`` queue and the
workers' internal one), each an arq `Worker` with its own runtime.  Signals are handled here,
once: SIGTERM/SIGINT let the jobs running finish for up to ``shutdown_grace_s`` (arq's
``job_completion_wait``), then every worker stops.  When Redis goes away, arq's poll loop ends
with a connection error; the worker is built again after a back-off, so the process
reconnects in place like the stream workers instead of exiting.

A job that ends in a refusal (`REFUSALS`: an untrusted or unsigned job, a spec that does not
validate, a run id taken by another spec, a reply for a busy or unknown run) is expected: its
result tells whoever enqueued it why, and the log gets one warning with the reason, never
arq's ERROR with a traceback, which is kept for what is not expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arq.cron import CronJob
from arq.worker import Function, Worker

from callgate.config import Settings
from callgate.connect import redis_client
from callgate.errors import AuthError, ConflictError, NotFoundError, RunSpecError
from callgate.jobs import SERIALIZERS, redis_settings
from callgate.keys import Keys
from callgate.ledger.schema import join_ledger_schema
from callgate.logs import log_fields
from callgate.streams.arq_cluster import health_check_key, on_cluster, queue_pool
from callgate.streams.arq_lease import LeasedWorker
from callgate.streams.commands import REDIS_ERRORS, backoff_s
from callgate.streams.service import Runtime, build_runtime, consumer_name, open_tool_sources
from callgate.streams.upkeep import announce

log = logging.getLogger("callgate.arq")

JOB_TIMEOUT_S = 10
"""Every callgate job is a few Redis round trips.  How soon a dead worker's job moves on is
not this but its lease (`callgate.streams.arq_lease`)."""


REFUSALS: tuple[type[Exception], ...] = (AuthError, RunSpecError, ConflictError, NotFoundError)
"""What a job may end with by design: the job fails with the reason, and nothing was done."""


class QuietRefusals(logging.Filter):
    """Drops arq's ERROR and traceback for a job that ended in one of `REFUSALS`: the job
    itself has logged it, once, as a warning with the reason (`logging_refusals`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        return not isinstance(failure, REFUSALS)


def quiet_refusals() -> None:
    """Install `QuietRefusals` on arq's worker logger, once per process."""
    arq_log = logging.getLogger("arq.worker")
    if not any(isinstance(f, QuietRefusals) for f in arq_log.filters):
        arq_log.addFilter(QuietRefusals())


def logging_refusals(function: Function) -> Function:
    """``function`` logging a refusal as one structured warning (job, id, error, reason)
    before it fails the job."""
    inner = function.coroutine

    async def job(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await inner(ctx, *args, **kwargs)
        except REFUSALS as exc:
            reason = exc.reason if isinstance(exc, AuthError) else str(exc)
            log.warning(
                "job refused",
                extra=log_fields(
                    job=function.name,
                    job_id=ctx.get("job_id"),
                    error=type(exc).__name__,
                    reason=reason,
                ),
            )
            raise

    return dataclasses.replace(function, coroutine=job)


@dataclass(frozen=True)
class QueueSpec:
    """One arq queue this process serves: its name, its functions, its periodic jobs."""

    name: str
    functions: Sequence[Function]
    cron_jobs: Sequence[CronJob] = field(default_factory=tuple)


def create_worker(
    settings: Settings, queue: QueueSpec, service: str, *, burst: bool = False
) -> Worker:
    """The arq worker for ``queue``: its own runtime in each job's ``ctx["runtime"]``, each
    job held on a short lease (`LeasedWorker`)."""

    async def on_startup(ctx: dict[str, Any]) -> None:
        runtime = build_runtime(service, settings)
        await join_ledger_schema(runtime.redis, runtime.keys)
        await open_tool_sources(runtime)
        ctx["runtime"] = runtime

    async def on_shutdown(ctx: dict[str, Any]) -> None:
        runtime: Runtime | None = ctx.pop("runtime", None)
        if runtime is not None:
            await runtime.close()

    quiet_refusals()
    return LeasedWorker(
        functions=[logging_refusals(f) for f in queue.functions],
        # Periodic jobs are for a serving worker: in burst mode one falling due mid-drain
        # would add a job nobody queued.
        cron_jobs=[] if burst else list(queue.cron_jobs),
        queue_name=queue.name,
        **_connection(settings, queue.name),
        burst=burst,
        on_startup=on_startup,
        on_shutdown=on_shutdown,
        handle_signals=False,
        job_completion_wait=max(1, round(settings.shutdown_grace_s)),
        job_timeout=JOB_TIMEOUT_S,
        poll_delay=0.05 if burst else 0.2,
        **SERIALIZERS,
        log_results=False,
        # arq's default hour, but never longer than the run itself is kept (retention).
        keep_result=min(3600, settings.retention_s),
    )


def _connection(settings: Settings, queue: str) -> dict[str, Any]:
    """Where the worker's arq client connects: arq's own from `redis_settings`, or on a cluster
    the master of the queue's slot (`callgate.streams.arq_cluster`)."""
    if not on_cluster(settings):
        return {"redis_settings": redis_settings(settings)}
    pool = queue_pool(settings, queue, **SERIALIZERS)
    return {"redis_pool": pool, "health_check_key": health_check_key(settings, queue)}


async def serve(
    settings: Settings, queues: Sequence[QueueSpec], service: str, *, burst: bool = False
) -> None:
    """Serve every queue until drained (burst) or stopped by a signal; always close."""
    stopped = asyncio.Event()
    workers: list[Worker] = []
    if not burst:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop, sig, workers, stopped)
    serving = asyncio.gather(
        *(
            _keep_serving(
                functools.partial(create_worker, settings, queue, service, burst=burst),
                workers,
                stopped,
            )
            for queue in queues
        )
    )
    if burst:
        await serving
        return
    # Like the stream workers, say that this process is alive (`callgate doctor` reads it).
    client = redis_client(settings.redis_url)
    key = Keys(settings.key_prefix).consumers(service)
    presence = asyncio.create_task(announce(client, key, consumer_name(service)))
    try:
        await serving
    finally:
        presence.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await presence
        await client.aclose()


def _stop(sig: signal.Signals, workers: list[Worker], stopped: asyncio.Event) -> None:
    stopped.set()
    for worker in workers:
        worker.handle_sig_wait_for_completion(sig)


async def _keep_serving(
    make: Callable[[], Worker], workers: list[Worker], stopped: asyncio.Event
) -> None:
    attempt = 0
    while not stopped.is_set():
        worker = make()
        workers.append(worker)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await worker.async_run()
            return
        except REDIS_ERRORS as exc:
            log.warning(
                "redis unavailable; restarting the arq worker in place",
                extra=log_fields(error=repr(exc), attempt=attempt),
            )
        finally:
            workers.remove(worker)
            with contextlib.suppress(*REDIS_ERRORS):
                await worker.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), backoff_s(attempt))
        attempt += 1
