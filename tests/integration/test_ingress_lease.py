"""A dead ingress's job moves on within seconds; a live one keeps its job however long it runs.

arq held a job for the job timeout + 10 s (20 s) after its worker died; callgate's workers
hold a job on a `LEASE_S` lease they renew while it runs (`callgate.streams.arq_lease`).
Both sides on a real Redis: a real ingress process killing itself (SIGKILL) mid-job, and two
workers competing for one slow job."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from arq.connections import ArqRedis
from arq.worker import func

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.streams.arq import QueueSpec, create_worker
from callgate.streams.arq_lease import LEASE_S
from callgate.streams.service import Runtime
from tests.integration.helpers import drain, new_run_id
from tests.seed import run_spec as spec

RECOVERED_WITHIN_S = 10.0
"""Well above the lease (and a worker's start on a slow machine), well below arq's 20 s."""


async def test_a_killed_ingress_job_is_taken_by_another_within_seconds(
    settings: Settings, client: CallgateClient, runtime: Runtime, subprocess_env: dict[str, str]
) -> None:
    run_id = await client.submit(spec(new_run_id()))
    # The first ingress creates the run, then dies (SIGKILL) before finishing the job.
    env = {**subprocess_env, "CALLGATE_CRASH_AT": "ingress.after_create"}
    dying = subprocess.run(
        [sys.executable, "-m", "callgate.services.ingress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    died_at = time.monotonic()
    assert dying.returncode == -9, dying.stderr[-2000:]
    assert await runtime.ledger.get_run(run_id) is not None

    # Another ingress takes the job as soon as the dead one's lease runs out.
    assert await drain(settings) == (1, 0)
    recovered_s = time.monotonic() - died_at
    assert recovered_s < RECOVERED_WITHIN_S, f"the job moved on after {recovered_s:.1f} s"


async def test_a_live_worker_keeps_a_job_that_outlasts_its_lease(
    settings: Settings, pool: ArqRedis
) -> None:
    starts: list[str] = []
    done = asyncio.Event()

    async def slow_job(ctx: dict[str, Any]) -> None:
        starts.append(ctx["job_id"])
        await asyncio.sleep(LEASE_S * 2)
        done.set()

    queue = QueueSpec(f"{settings.key_prefix}:lease-test", [func(slow_job, name="slow_job")])
    holder = create_worker(settings, queue, "lease-holder")
    rival = create_worker(settings, queue, "lease-rival")
    await pool.enqueue_job("slow_job", _queue_name=queue.name, _job_id=new_run_id())
    running = [asyncio.create_task(holder.async_run())]
    try:
        while not starts:
            await asyncio.sleep(0.05)
        # A second worker polls throughout the job, which runs past two leases.
        running.append(asyncio.create_task(rival.async_run()))
        await asyncio.wait_for(done.wait(), LEASE_S * 4)
        while holder.running_jobs():  # its result written
            await asyncio.sleep(0.05)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await holder.close()
        await rival.close()
    assert len(starts) == 1, f"the job ran {len(starts)} times"
