"""`CallgateClient`: submit runs, read their state, wait for them, from any Python service.

Submitting writes the arq ``start_run`` job create-only (`callgate.streams.public_queue`) with
job id = run id, signed with this service's key (and carrying an end user's identity token, if
given) so the ingress can verify who vouches for the run's identity; the spec is validated here
first so a caller learns of a typo at once rather than from a failed job.  The client remembers
what it submitted under each run id, and ``wait`` never returns a run that is not that one (a
job someone else wrote first under the id).  Waiting blocks
on the run's event stream (XREAD BLOCK): every status change writes an event in the same
atomic step, so reading the last event id *before* the status can never miss a change.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import Job

from callgate.auth.deployment import signer_of
from callgate.auth.tenancy import job_id
from callgate.auth.tokens import Signer, issuer_of, sign_submission
from callgate.config import Settings
from callgate.connect import redis_client
from callgate.errors import (
    CallgateError,
    JobFailedError,
    NotFoundError,
    RunSpecError,
    SpecConflictError,
)
from callgate.jobs import (
    REPLY_RUN,
    START_RUN,
    JobQueue,
    ReplyJob,
    StartJob,
    job_deserializer,
    queue_name,
)
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.records import CallRecord, Event, RunRecord
from callgate.runspec import RunSpec, parse_spec, spec_hash, with_run_id
from callgate.states import RUN_PAUSED, RUN_TERMINAL
from callgate.streams.arq_cluster import cluster_job_id
from callgate.streams.public_queue import enqueue_once

WAIT_BLOCK_MS = 1000
"""Longest single XREAD BLOCK; the status is re-read after each (covers lost connections)."""
DEDUP_WAIT_S = 5.0
"""How long `CallgateClient.submit` waits for an earlier job under the same run id to end, to
tell whether it was the same request."""
REMEMBERED_SUBMISSIONS = 100_000
"""How many of its own submissions a client can tell apart from a run someone else started
under the same id (`CallgateClient.wait`)."""
PENDING_POLL_MS = 50
"""How often ``wait`` looks again while a start job for the run id is still to be run: its
end writes no event to block on."""


def settled(status: str) -> bool:
    """A run ``wait`` returns for: terminal, or paused until someone acts."""
    return status in RUN_TERMINAL or status in RUN_PAUSED


def call_view(call: CallRecord) -> dict[str, Any]:
    """One call as JSON: what was asked, what was decided, what came of it."""
    return {
        "call_id": call.call_id,
        "turn": call.turn,
        "index": call.index,
        "provider_call_id": call.provider_call_id,
        "tool": call.tool,
        "effect": None if call.effect is None else call.effect.value,
        "effect_source": call.effect_source,
        "operation_id": call.operation_id,
        "arguments": call.arguments,
        "state": call.state.value,
        "decision": call.decision,
        "reason": call.reason,
        "attempts": call.attempts,
        "result": None if call.result is None else call.result.model_dump(mode="json"),
    }


def run_view(run: RunRecord, calls: list[CallRecord]) -> dict[str, Any]:
    """The run as JSON, with every call in turn and provider order."""
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "reason": run.reason,
        "final_text": run.final_text,
        "api": run.api,
        "model": run.model,
        "turns": run.turn,
        "usage": {"input_tokens": run.usage_input_tokens, "output_tokens": run.usage_output_tokens},
        "calls": [call_view(c) for c in calls],
    }


def _same_spec(submitted: object, parsed: RunSpec) -> bool:
    """Whether a spec someone submitted is ``parsed`` (compared as validated, so defaults
    written out or left out agree)."""
    if isinstance(submitted, dict):  # a foreign client may leave the run id to the job id
        submitted = {"run_id": parsed.run_id, **submitted}
    try:
        return parse_spec(submitted) == parsed
    except RunSpecError:
        return False


@dataclass(frozen=True, slots=True)
class Submission:
    """What this client submitted under a run id: the run it may call its own."""

    vouched_by: str
    """``service:NAME`` for this client's own key, ``issuer:ISS`` for an identity token."""
    spec_hash: str | None
    """The run's `callgate.runspec.spec_hash`, when this client knows the identity."""
    spec: RunSpec | None = None
    """The spec, when the identity is the issuer's to verify (hashed with the run's)."""

    def mismatch(self, run: RunRecord) -> str | None:
        """Why ``run`` is not the run submitted; None when it is."""
        if run.vouched_by != self.vouched_by:
            return f"vouched for by {run.vouched_by}, not {self.vouched_by}"
        expected = self.spec_hash
        if self.spec is not None:
            expected = spec_hash(self.spec, run.identity)
        if run.spec_hash != expected:
            return "created from another spec or identity"
        return None


class CallgateClient:
    """A connection to one callgate deployment (its Redis and key prefix)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.keys = Keys(self.settings.key_prefix, self.settings.partitions)
        self.redis = redis_client(self.settings.redis_url)
        self.ledger = Ledger(self.redis, self.keys, self.settings)
        self._queue = JobQueue(self.settings, queue_name(self.settings))
        self._signer: Signer | None = None
        self._submitted: OrderedDict[str, Submission] = OrderedDict()

    def signer(self) -> Signer:
        """This service's signing key (read once; `KeyFileError` says what to do if absent)."""
        if self._signer is None:
            self._signer = signer_of(self.settings)
        return self._signer

    async def submit(
        self, spec: RunSpec | Mapping[str, Any], *, identity_token: str | None = None
    ) -> str:
        """Validate and enqueue a run; returns its run id (minted if the spec has none).

        The job is signed with this service's key, vouching for the spec's identity; with
        ``identity_token`` (a short-lived JWT from an issuer the deployment trusts, used once)
        the run acts for the token's subject instead.  Submitting the same run id again with
        the same spec is harmless: no second job is written while one is queued or its result
        kept, and the ledger's create-once guard covers the rest.  A different spec under a
        taken run id raises `SpecConflictError`, here when a job under it is kept, else from
        `wait` once the ingress has refused it or the run is found to be another's.  Under
        ``replica`` durability it returns only once a replica holds the job (else
        `RedisUnavailableError`: submit again), a job that already ran included.
        """
        parsed = with_run_id(parse_spec(spec if isinstance(spec, RunSpec) else dict(spec)))
        run_id = parsed.run_id
        assert run_id is not None
        payload = parsed.model_dump(mode="json", exclude_none=True)
        token = sign_submission(self.signer(), run_id=run_id, spec=payload)
        job = StartJob(spec=payload, token=token, identity_token=identity_token)
        self._remember(run_id, self._submission(payload, identity_token))
        kept = await self.redis.exists(result_key_prefix + self._job_id(run_id))
        if kept:
            await self._same_as_queued(parsed)
            if self.settings.write_durability != "replica":
                return run_id
            # The master's finished job may be one no replica got (nor the run it created):
            # it is enqueued again and confirmed, and finds its run, or makes it again.
        if not await enqueue_once(self.redis, self.settings, START_RUN, job, run_id) and not kept:
            await self._same_as_queued(parsed)
        return run_id

    def _remember(self, run_id: str, submission: Submission) -> None:
        """Keep what was submitted under ``run_id``, for the last `REMEMBERED_SUBMISSIONS`
        runs (a long-lived service submits without end; ``wait`` follows soon after)."""
        self._submitted[run_id] = submission
        self._submitted.move_to_end(run_id)
        if len(self._submitted) > REMEMBERED_SUBMISSIONS:
            self._submitted.popitem(last=False)

    def _submission(self, payload: dict[str, Any], identity_token: str | None) -> Submission:
        parsed = parse_spec(payload)  # exactly as the ingress will read the job
        if identity_token is None:
            return Submission(
                f"service:{self.signer().key_id}", spec_hash(parsed, payload.get("identity") or {})
            )
        return Submission(f"issuer:{issuer_of(identity_token)}", None, parsed)

    async def _same_as_queued(self, parsed: RunSpec) -> None:
        """No job was written: one with this id is queued, running or has its result kept.
        Ours never reaches the ingress, so a conflict is found here, from the kept result (the
        one part of a job a submitter may read): a different spec under that id, or the same
        one whose job failed as a conflict.  A job still to be run is waited for, briefly; if
        it is someone else's with the same spec, ``wait`` finds its voucher differs."""
        assert parsed.run_id is not None
        job = await self._job(parsed.run_id)
        deadline = time.monotonic() + DEDUP_WAIT_S
        info = await job.result_info()
        while (
            info is None and time.monotonic() < deadline and await self._job_pending(parsed.run_id)
        ):
            await asyncio.sleep(PENDING_POLL_MS / 1000)
            info = await job.result_info()
        if info is None:
            return  # nothing kept to compare with: the ledger's create-once guard holds
        their = info.args[0] if info.args else None
        if not isinstance(their, dict) or not _same_spec(their.get("spec"), parsed):
            raise SpecConflictError(parsed.run_id)
        failure = await self._job_failure(parsed.run_id)
        if isinstance(failure, SpecConflictError):
            raise failure

    async def run(self, run_id: str) -> RunRecord | None:
        return await self.ledger.get_run(run_id)

    async def status(self, run_id: str) -> dict[str, Any]:
        """The run record as JSON; `NotFoundError` if it does not exist (yet)."""
        run = await self.ledger.get_run(run_id)
        if run is None:
            await self._raise_if_job_failed(run_id)
            raise NotFoundError(f"no run {run_id}")
        return run.model_dump(mode="json")

    async def view(self, run_id: str) -> dict[str, Any]:
        """The run and every call (`run_view`)."""
        run = await self.ledger.get_run(run_id)
        if run is None:
            raise NotFoundError(f"no run {run_id}")
        return run_view(run, await self.ledger.run_calls(run_id, run.turn))

    async def events(self, run_id: str) -> list[Event]:
        """The run's (redacted) event log, oldest first."""
        return await self.ledger.events(run_id)

    async def wait(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        """Block until the run is terminal or paused; return its status (`status`).

        Raises `TimeoutError` after ``timeout_s``, `JobFailedError` if its start job failed,
        `SpecConflictError` if the run id was taken by another spec, or (for a run this client
        submitted) the run under the id is not the one it submitted: another spec, identity or
        voucher.  The status of such another run is never returned.
        """
        deadline = time.monotonic() + timeout_s
        stream = self.keys.events(run_id)
        watch_job = True  # the start job is looked at first, while pending, and at the end
        while True:
            last = await self._last_event_id(stream)
            run = await self.ledger.get_run(run_id)
            if run is not None:
                self._raise_if_not_submitted(run)
            pending = False
            if watch_job or run is None or settled(run.status):
                failure = await self._job_failure(run_id)
                conflict = isinstance(failure, SpecConflictError)
                if failure is not None and (run is None or conflict):
                    raise failure
                # A start job still to be run may yet conflict with the run this id names.
                pending = run is not None and await self._job_pending(run_id)
                watch_job = pending
            if run is not None and settled(run.status) and not pending:
                return run.model_dump(mode="json")
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                status = "not created" if run is None else run.status.value
                raise TimeoutError(f"run {run_id} still {status} after {timeout_s}s")
            block_ms = PENDING_POLL_MS if pending else WAIT_BLOCK_MS
            await self.redis.xread({stream: last}, count=100, block=min(left_ms, block_ms))

    def _raise_if_not_submitted(self, run: RunRecord) -> None:
        mine = self._submitted.get(run.run_id)
        why = None if mine is None else mine.mismatch(run)
        if why is not None:
            raise SpecConflictError(
                run.run_id,
                f"run {run.run_id} is not the run this client "
                f"submitted ({why}): another job took the run id first; "
                "submit under a new run id",
            )

    async def _last_event_id(self, stream: str) -> str:
        entries = await self.redis.xrevrange(stream, count=1)
        if not entries:
            return "0-0"
        entry_id = entries[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def _job(self, run_id: str) -> Job:
        """The public queue's job ``run_id`` (or a reply id)."""
        pool = await self._queue.pool()
        return Job(
            self._job_id(run_id),
            pool,
            _queue_name=queue_name(self.settings),
            _deserializer=job_deserializer,
        )

    async def _job_pending(self, run_id: str) -> bool:
        """Whether a start job under ``run_id`` is queued or running: arq deletes its key when
        it ends (and a submitter may check that key, not read the job)."""
        return bool(await self.redis.exists(job_key_prefix + self._job_id(run_id)))

    def _job_id(self, job_id: str) -> str:
        """arq's id of the public queue's job ``job_id`` (a run or reply id)."""
        return cluster_job_id(self.settings, queue_name(self.settings), job_id)

    async def _job_failure(self, run_id: str) -> CallgateError | None:
        """Why the start job under ``run_id`` failed, from its kept result (JSON:
        ``{"error": type, "message": text}``); None if it did not, or nothing is kept."""
        info = await (await self._job(run_id)).result_info()
        if info is None or info.success:
            return None
        detail = info.result
        if isinstance(detail, dict):
            if detail.get("error") == SpecConflictError.__name__:
                return SpecConflictError(run_id, str(detail.get("message") or "") or None)
            detail = detail.get("message", detail)
        return JobFailedError(f"run {run_id} was not started: {detail}")

    async def reply(
        self,
        run_id: str,
        text: str,
        *,
        policy: Literal["reject", "enqueue"] = "reject",
        max_turns: int | None = None,
    ) -> str:
        """Send a follow-up input to a completed run, signed with this service's key; returns
        the reply id (`reply_result` waits for its verdict).  ``policy`` says what happens if
        the run is busy: refused, or admitted once when it next completes
        (`callgate.conversation`)."""
        reply_id = job_id(run_id, "reply")  # a tenant's run: under its prefix, as its login needs
        fields: dict[str, Any] = {
            "run_id": run_id,
            "reply_id": reply_id,
            "input": text,
            "policy": policy,
            "max_turns": max_turns,
        }
        unsigned = ReplyJob(**fields, token="unsigned")
        token = sign_submission(self.signer(), run_id=run_id, spec=unsigned.signed_part())
        job = ReplyJob(**fields, token=token)
        if not await enqueue_once(self.redis, self.settings, REPLY_RUN, job, reply_id):
            raise JobFailedError(f"reply {reply_id}: a job under this id exists; send it again")
        return reply_id

    async def reply_result(self, reply_id: str, timeout_s: float) -> dict[str, Any]:
        """The admitted reply's result; `JobFailedError` with the reason if it was refused,
        `TimeoutError` if no verdict came within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = await (await self._job(reply_id)).result_info()
            if info is not None:
                if info.success and isinstance(info.result, dict):
                    return info.result
                detail = info.result.get("message") if isinstance(info.result, dict) else None
                raise JobFailedError(f"reply {reply_id} was refused: {detail or info.result}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"reply {reply_id}: no verdict after {timeout_s}s")
            await asyncio.sleep(0.1)

    async def _raise_if_job_failed(self, run_id: str) -> None:
        failure = await self._job_failure(run_id)
        if failure is not None:
            raise failure

    async def close(self) -> None:
        await self._queue.close()
        await self.ledger.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> CallgateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
