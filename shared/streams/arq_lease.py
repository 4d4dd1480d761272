"""An arq worker whose hold on a running job is a short lease, renewed while the job runs.

arq marks a job it starts with an in-progress key that expires after the longest job timeout
plus a fixed 10 s; until it expires, no other worker takes the job.  So a worker killed
mid-job (SIGKILL, a lost machine) held its jobs for 20 s with callgate's 10 s timeout, and the
runs it was starting waited that long.  Here the key expires after `LEASE_S`, and the worker
renews it every `RENEW_EVERY_S` for as long as the job's task is running, so a dead worker's
jobs move on within a few seconds while a live one keeps them.

A worker that stalls past its lease (its event loop blocked, Redis out of reach) may find its
job started again elsewhere.  That costs nothing callgate relies on: every job is idempotent
in the ledger (a run is created once, an approval expires once, the sweeps are
compare-and-set), so a second start finds the work done; arq's own at-least-once delivery
asks the same of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.worker import Worker

from callgate.logs import log_fields
from callgate.streams.commands import REDIS_ERRORS

log = logging.getLogger("callgate.arq")

LEASE_S = 3.0
"""How long a job stays held after its worker last renewed it (arq's own was 20 s)."""

RENEW_EVERY_S = 1.0
"""Three renewals per lease: one lost round trip does not lose the job."""


class LeasedWorker(Worker):
    """`arq.worker.Worker` holding its running jobs on a renewed `LEASE_S` lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # arq sets its in-progress keys to this many seconds when it starts a job.
        self.in_progress_timeout_s = LEASE_S

    async def main(self) -> None:
        renewing = asyncio.create_task(self._keep_renewing())
        try:
            await super().main()
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    def running_jobs(self) -> list[str]:
        """The ids of the jobs whose tasks have not finished."""
        return [job_id for job_id, task in self.tasks.items() if not task.done()]

    async def renew(self) -> None:
        """Push back the expiry of every running job's in-progress key.  ``PEXPIRE`` on a key
        already gone (the job just finished) is a no-op, never a new hold."""
        running = self.running_jobs()
        if not running:
            return
        lease_ms = int(LEASE_S * 1000)
        async with self.pool.pipeline(transaction=False) as pipe:
            for job_id in running:
                pipe.pexpire(in_progress_key_prefix + job_id, lease_ms)
            await pipe.execute()

    async def _keep_renewing(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                await self.renew()
            except REDIS_ERRORS as exc:
                # The poll loop meets the same error and rebuilds the worker; until then the
                # lease runs out, and the job may go to another worker (see the module doc).
                log.warning("arq job lease not renewed", extra=log_fields(error=repr(exc)))
