"""`CallgateClient`: submit runs, read their state, wait for them, from any Python service.

Submitting enqueues the arq ``start_run`` job with job id = run id, signed with this
service's key (or carrying an end user's identity token) so the ingress can verify who vouches
for the run's identity; the spec is validated here first so a caller learns of a typo at once
rather than from a failed job.  Waiting blocks
on the run's event stream (XREAD BLOCK): every status change writes an event in the same
atomic step, so reading the last event id *before* the status can never miss a change.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from arq.jobs import Job

from callgate.auth.deployment import signer_of
from callgate.auth.tokens import Signer, sign_submission
from callgate.config import Settings
from callgate.connect import redis_client
from callgate.errors import JobFailedError, NotFoundError
from callgate.jobs import START_RUN, JobQueue, StartJob, job_deserializer, queue_name
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.records import CallRecord, Event, RunRecord
from callgate.runspec import RunSpec, parse_spec, with_run_id
from callgate.states import RUN_PAUSED, RUN_TERMINAL

WAIT_BLOCK_MS = 1000
"""Longest single XREAD BLOCK; the status is re-read after each (covers lost connections)."""


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
        "usage": {
            "input_tokens": run.usage_input_tokens,
            "output_tokens": run.usage_output_tokens,
        },
        "calls": [call_view(c) for c in calls],
    }


class CallgateClient:
    """A connection to one callgate deployment (its Redis and key prefix)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.keys = Keys(self.settings.key_prefix, self.settings.partitions)
        self.redis = redis_client(self.settings.redis_url)
        self.ledger = Ledger(self.redis, self.keys, self.settings)
        self._queue = JobQueue(self.settings, queue_name(self.settings))
        self._signer: Signer | None = None

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
        ``identity_token`` (a JWT from an issuer the deployment trusts) the run acts for the
        token's subject instead.  Submitting the same run id again is harmless: arq drops the
        duplicate job while its result is kept, and the ledger's create-once guard covers the
        rest.
        """
        parsed = with_run_id(parse_spec(spec if isinstance(spec, RunSpec) else dict(spec)))
        assert parsed.run_id is not None
        payload = parsed.model_dump(mode="json", exclude_none=True)
        if identity_token is not None:
            job = StartJob(spec=payload, identity_token=identity_token)
        else:
            token = sign_submission(self.signer(), run_id=parsed.run_id, spec=payload)
            job = StartJob(spec=payload, token=token)
        pool = await self._queue.pool()
        await pool.enqueue_job(START_RUN, job.model_dump(exclude_none=True), _job_id=parsed.run_id)
        return parsed.run_id

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

        Raises `TimeoutError` after ``timeout_s``, `JobFailedError` if its start job failed.
        """
        deadline = time.monotonic() + timeout_s
        stream = self.keys.events(run_id)
        while True:
            last = await self._last_event_id(stream)
            run = await self.ledger.get_run(run_id)
            if run is None:
                await self._raise_if_job_failed(run_id)
            elif settled(run.status):
                return run.model_dump(mode="json")
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                status = "not created" if run is None else run.status.value
                raise TimeoutError(f"run {run_id} still {status} after {timeout_s}s")
            await self.redis.xread({stream: last}, count=100, block=min(left_ms, WAIT_BLOCK_MS))

    async def _last_event_id(self, stream: str) -> str:
        entries = await self.redis.xrevrange(stream, count=1)
        if not entries:
            return "0-0"
        entry_id = entries[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def _raise_if_job_failed(self, run_id: str) -> None:
        pool = await self._queue.pool()
        job = Job(
            run_id, pool, _queue_name=queue_name(self.settings), _deserializer=job_deserializer
        )
        info = await job.result_info()
        if info is not None and not info.success:
            detail = info.result
            if isinstance(detail, dict):
                detail = detail.get("message", detail)
            raise JobFailedError(f"run {run_id} was not started: {detail}")

    async def close(self) -> None:
        await self._queue.close()
        await self.ledger.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> CallgateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
