"""ingress worker (arq): turns a ``start_run`` job into a run record and its first turn request.

arq carries what streams do not do well: the job other services enqueue (JSON, never pickle,
see `callgate.jobs`), delayed work and periodic sweeps.  It serves two queues: the public one,
where a submitter may enqueue ``start_run`` and ``reply_run`` (a follow-up input,
`callgate.conversation`) and nothing else, and the workers' own (approval expiry, the sweeps:
`callgate.sweeps`, and `sweep_public_queue`, which undoes a submitter's re-score of another's
queued job).  Before anything exists the job's identity is verified
(`callgate.auth.admission`) and an identity token's one use recorded; then creating the run
is the ledger's create-once step: the run record, its first history item, its deadline entry
and ``TurnRequest(turn=1)`` on the turns stream land in one guarded atomic step, and a second
start of the same run id is a no-op however it arrives (arq is at-least-once) — if it is the
same request: the record keeps a hash of the spec and verified identity, and a start that
differs fails with `SpecConflictError`.  A refused job (untrusted, a bad spec, a conflict) is
one warning with the reason in this worker's log (`callgate.streams.arq.logging_refusals`).

``python -m callgate.services.ingress [--burst]``; SIGTERM/SIGINT let a running job finish for
up to ``shutdown_grace_s``, then stop (`callgate.streams.arq`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from arq import Retry
from arq.cron import cron
from arq.worker import func
from pydantic import ValidationError

from callgate.auth.admission import Admitted, admit
from callgate.clock import now_ms
from callgate.config import Settings
from callgate.conversation import ENQUEUED_MAX_TRIES, reply_run
from callgate.crashpoints import crash_point
from callgate.decisions.expiry import EXPIRE_APPROVAL
from callgate.errors import AuthError, CallgateError, RunSpecError, SpecConflictError
from callgate.jobs import REPLY_RUN, START_RUN, StartJob, internal_queue_name, queue_name
from callgate.logs import log_fields, setup_logging
from callgate.providers import get_adapter
from callgate.records import RunRecord
from callgate.runspec import RunSpec, parse_spec, to_run_record
from callgate.streams.arq import JOB_TIMEOUT_S, QueueSpec, serve
from callgate.streams.arq_cluster import cluster_job_id, plain_job_id
from callgate.streams.commands import REDIS_ERRORS
from callgate.streams.public_queue import put_back_rescored
from callgate.streams.service import Runtime, run_worker, tune_gc
from callgate.sweeps import SWEEP_BATCH, expire_approval, sweep_approvals, sweep_deadlines
from callgate.tools.registry import ToolRegistry

log = logging.getLogger("callgate.ingress")

SWEEP_EVERY_S = 10


# -- start_run -------------------------------------------------------------------------------


def _selected_tools(registry: ToolRegistry, spec: RunSpec) -> list[str]:
    """The registered tools the run may use; the spec may only select among them (and among
    the registered acceptance validators, whether or not it has an allow-list)."""
    validator = getattr(spec.acceptance, "validator", None)  # a `ValidatorRule`
    if validator is not None and validator not in registry.validators:
        known = ", ".join(sorted(registry.validators)) or "none"
        raise RunSpecError(
            [
                f"acceptance.validator: {validator!r} is not a registered "
                f"validator (registered: {known})"
            ]
        )
    if spec.allowed_tools is None:
        return list(registry.names())
    missing = registry.unknown(spec.allowed_tools)
    if missing:
        raise RunSpecError(
            [
                f"allowed_tools: {', '.join(missing)} not registered in this "
                f"deployment (registered: {registry.describe()})"
            ]
        )
    return list(dict.fromkeys(spec.allowed_tools))


def _start_job(job: Any) -> StartJob:
    """The job's `StartJob`; a bare spec (no signature, no token) is refused."""
    if not isinstance(job, dict) or "spec" not in job:
        raise AuthError("unsigned: a start job carries {spec, token} or {spec, identity_token}")
    try:
        return StartJob.model_validate(job)
    except ValidationError as exc:
        raise RunSpecError([f"job: {e['msg']}" for e in exc.errors()]) from exc


START_MAX_TRIES = 40
"""How often a start job is tried.  Every try is harmless (the run is created once), and each
outage takes some: Redis away (a restart, a failover) defers the job (`_later`), and an ingress
killed while holding it hands it on after its lease.  Five, arq's default, was spent within
a cluster failover's few seconds and the run was never created; the cap is only against a
job that never succeeds, which a refusal is not (it fails at once)."""
RETRY_CAP_S = 5.0


def _later(ctx: dict[str, Any]) -> Retry:
    """Try again after 0.5 s, 1 s, 2 s, 4 s, then every `RETRY_CAP_S` (about three minutes
    over `START_MAX_TRIES`)."""
    tries = int(ctx.get("job_try") or 1)
    return Retry(defer=min(RETRY_CAP_S, 0.5 * 2 ** min(tries - 1, 8)))


async def start_run(ctx: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """`_start_run`, deferred while Redis is away (Redis errors, and a ledger error that says
    to retry)."""
    try:
        return await _start_run(ctx, job)
    except REDIS_ERRORS as exc:
        raise _later(ctx) from exc


async def _start_run(ctx: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Create the run once — record, first history item, deadline entry, turn-1 request — if
    the deployment verifies who vouches for its identity (`callgate.auth.admission`).

    The run id is the spec's, else the arq job id (so a foreign client that only sets the job
    id still gets one run per job).  Returns ``{"run_id", "created"}``; ``created`` is False
    when the run existed already (for the same spec and identity; else `SpecConflictError`).
    A refused job creates nothing and fails with the reason.
    """
    rt: Runtime = ctx["runtime"]
    start = _start_job(job)
    parsed = parse_spec(start.spec)
    run_id = parsed.run_id or plain_job_id(str(ctx.get("job_id") or ""))
    admitted = await _admitted(rt, start, run_id)
    if parsed.run_id is None:
        parsed = parse_spec({**start.spec, "run_id": run_id})
    tools = _selected_tools(rt.registry, parsed)
    run = to_run_record(parsed, now_ms(), tools, admitted.identity, admitted.vouched_by)
    tx = rt.ledger.start_run(run, get_adapter(run.api).initial_history(run.input))
    try:
        # Shielded: a shutdown must not abandon the one write that makes the run exist.
        result = await asyncio.shield(rt.ledger.apply(tx))
    except CallgateError as exc:
        if exc.retryable:
            raise _later(ctx) from exc
        raise
    if result.ok:
        crash_point("ingress.after_create")
    else:
        await _same_request(rt, run)
    log.info(
        "run started" if result.ok else "run exists already",
        extra=log_fields(run_id=run_id, api=run.api, model=run.model),
    )
    return {"run_id": run_id, "created": result.ok}


async def _admitted(rt: Runtime, start: StartJob, run_id: str) -> Admitted:
    """`admit`, and an identity token's one use recorded: a second run with it is refused (the
    same run again, a redelivered job, finds its own record)."""
    admitted = admit(
        start,
        run_id,
        rt.trust.current(),
        now=now_ms() / 1000,
        token_max_age_s=rt.settings.identity_token_max_age_s,
    )
    use = admitted.token_use
    if use is not None and run_id != await rt.ledger.use_identity_token(
        use.token_id, run_id, use.expires_ms
    ):
        raise AuthError(
            "identity token already used: each starts one run; "
            "get a new one from the identity provider"
        )
    return admitted


async def _same_request(rt: Runtime, run: RunRecord) -> None:
    """A second start of an existing run id is harmless only if it is the same request: the
    same spec for the same verified identity.  Anything else fails the job with
    `SpecConflictError`, which the submitter's client reads from the job's result; the run it
    would have replaced is untouched.  Only this rare path reads the record (its hash was
    written by the create-once step itself, so it is there whenever the run is); a run created
    before hashes were kept has none and is taken as the same."""
    existing = await rt.ledger.get_run(run.run_id)
    if existing is None or existing.spec_hash in (None, run.spec_hash):
        return
    raise SpecConflictError(run.run_id)


# -- the public queue's sweep ----------------------------------------------------------------


async def sweep_public_queue(ctx: dict[str, Any]) -> int:
    """Undo re-scores of public queue entries into the future (`put_back_rescored`):
    submitters may ZADD there, to enqueue, so one may push another's job far back."""
    rt: Runtime = ctx["runtime"]
    count = await put_back_rescored(rt.redis, rt.settings, SWEEP_BATCH)
    if count:
        log.warning("re-scored queue entries put back", extra=log_fields(count=count))
    return count


# -- the worker ------------------------------------------------------------------------------


def queues(settings: Settings) -> list[QueueSpec]:
    """The public queue (``start_run``, ``reply_run``) and the internal one (expiry, and the
    sweeps every `SWEEP_EVERY_S`, the public queue's among them)."""
    sweeps = [
        cron(
            sweep,
            name=sweep.__name__,
            second=set(range(offset_s, 60, SWEEP_EVERY_S)),
            job_id=cluster_job_id(
                settings,
                internal_queue_name(settings),
                f"cron:{settings.key_prefix}:{sweep.__name__}",
            ),
            run_at_startup=True,
            timeout=JOB_TIMEOUT_S,
        )
        for offset_s, sweep in enumerate((sweep_deadlines, sweep_approvals, sweep_public_queue))
    ]
    return [
        QueueSpec(
            queue_name(settings),
            [
                func(start_run, name=START_RUN, max_tries=START_MAX_TRIES),
                func(reply_run, name=REPLY_RUN, max_tries=ENQUEUED_MAX_TRIES),
            ],
        ),
        QueueSpec(
            internal_queue_name(settings), [func(expire_approval, name=EXPIRE_APPROVAL)], sweeps
        ),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m callgate.services.ingress")
    parser.add_argument("--burst", action="store_true", help="run queued jobs, then exit")
    args = parser.parse_args(argv)
    setup_logging("ingress")
    tune_gc()
    run_worker("ingress", _serve(burst=args.burst))


async def _serve(*, burst: bool) -> None:
    # Settings are read inside `run_worker`, so a bad one is its one line, not a traceback.
    settings = Settings()
    await serve(settings, queues(settings), "ingress", burst=burst)


if __name__ == "__main__":
    main()
