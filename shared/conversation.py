"""Conversations: a completed run takes a follow-up input as its next turn (DESIGN §10).

A conversation is one run with further inputs, so its history stays the provider's own (every
earlier turn's tool results under their call ids) and its budget is the run's: turns, tokens
and time count across every input (``max_turns`` may be raised with a reply).  A reply is the
ingress job ``reply_run`` (`callgate.jobs.ReplyJob`), signed by a submitting service that the
deployment lets act for the run's identity; the sender is recorded.

While the run is busy a reply follows its recorded policy: ``reject`` (the job fails with a
conflict, nothing changes) or ``enqueue`` (the job waits and is admitted when the run next
completes, after the input it is answering — never while a call is in flight; a run that ended
otherwise refuses it at once).  Each reply id
is admitted at most once, however often its job runs.
"""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry
from pydantic import ValidationError

from callgate.auth.tokens import check_grant, verify_submission
from callgate.clock import now_ms
from callgate.errors import NotFoundError, RunBusyError, RunSpecError
from callgate.jobs import ReplyJob
from callgate.ledger.steps import items_json
from callgate.logs import log_fields
from callgate.providers import get_adapter
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.service import Runtime

log = logging.getLogger("callgate.conversation")

ENQUEUED_RECHECK_S = 2.0
"""How often a reply waiting for its busy run looks again."""
ENQUEUED_MAX_TRIES = 900
"""…for at most about half an hour; then it fails, and says why."""


def reply_key(reply_id: str) -> str:
    """The id a reply is admitted once under (`Ledger.once`)."""
    return f"reply:{reply_id}"


def read_reply(raw: Any) -> ReplyJob:
    """The job's `ReplyJob`, or `RunSpecError` listing what is wrong with it."""
    try:
        return ReplyJob.model_validate(raw)
    except ValidationError as exc:
        raise RunSpecError([f"reply: {e['msg']}" for e in exc.errors()]) from exc


async def reply_run(ctx: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """Admit one follow-up input into its run: ``{"run_id", "turn", "admitted"}``."""
    rt: Runtime = ctx["runtime"]
    job = read_reply(raw)
    run = await rt.ledger.get_run(job.run_id)
    if run is None:
        raise NotFoundError(f"no run {job.run_id}")
    trust = rt.trust.current()
    # A refusal is logged once, with the reason, by `callgate.streams.arq.logging_refusals`.
    sender = verify_submission(
        job.token, trust, run_id=job.run_id, spec=job.signed_part(), now=now_ms() / 1000
    )
    check_grant(trust, sender, run.identity)
    if await rt.ledger.applied_once(job.run_id, reply_key(job.reply_id)):
        return {"run_id": job.run_id, "admitted": False, "detail": "admitted already"}
    if run.status != RunState.COMPLETED:
        live = run.status not in RUN_TERMINAL  # an ended run will not complete: say so now
        if job.policy == "enqueue" and live and int(ctx.get("job_try", 1)) < ENQUEUED_MAX_TRIES:
            raise Retry(defer=ENQUEUED_RECHECK_S)
        raise RunBusyError(
            job.run_id,
            f"run {job.run_id} is {run.status.value}: a reply is "
            "taken only when it has completed (or send it with --policy enqueue)",
        )
    items = get_adapter(run.api).initial_history(job.input)
    tx = await rt.ledger.continue_run(
        run,
        items_json(items),
        reply_id=job.reply_id,
        sender=f"service:{sender}",
        max_turns=max(job.max_turns or run.max_turns, run.turn + 1),
    )
    result = await rt.ledger.apply(tx)
    if not result.ok:
        raise RunBusyError(
            job.run_id,
            f"run {job.run_id} moved on while reply {job.reply_id} "
            "was being admitted; send it again",
        )
    log.info("reply admitted", extra=log_fields(run_id=job.run_id, turn=run.turn + 1))
    return {"run_id": job.run_id, "turn": run.turn + 1, "admitted": True}
