"""Approval expiry as an arq deferred job (delayed work belongs to arq: README, Architecture).

The validator schedules ``expire_approval`` for each pending approval's expiry time; the
ingress worker runs it, which posts an `ApprovalExpired` message onto the approvals stream so
the validator applies expiry exactly like a decision.  The ingress sweep over the pending
index is the backstop if a job is ever lost.
"""

from __future__ import annotations

import datetime as dt
import logging

from callgate.config import Settings
from callgate.decisions.record import ApprovalRecord
from callgate.jobs import JobQueue, internal_queue_name
from callgate.streams.arq_cluster import cluster_job_id

EXPIRE_APPROVAL = "expire_approval"
log = logging.getLogger("callgate.expiry")


class ApprovalExpiryScheduler:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queue = JobQueue(settings, internal_queue_name(settings))

    async def schedule(self, approval: ApprovalRecord) -> None:
        """Best effort: a lost job is covered by the ingress sweep."""
        when = dt.datetime.fromtimestamp(approval.expires_ms / 1000, tz=dt.UTC)
        try:
            pool = await self._queue.pool()
            await pool.enqueue_job(
                EXPIRE_APPROVAL,
                {
                    "run_id": approval.run_id,
                    "turn": approval.turn,
                    "call_id": approval.call_id,
                    "approval_id": approval.approval_id,
                },
                _job_id=cluster_job_id(
                    self.settings, self._queue.name, f"expire:{approval.approval_id}"
                ),
                _defer_until=when,
            )
        except Exception:
            log.exception("could not schedule approval expiry; the sweep will expire it")

    async def close(self) -> None:
        await self._queue.close()
