"""Helpers the integration tests share: fresh run ids, the public queue's ingress worker run in
burst mode, an HTTP session to a freshly reset stand-in service.  (Shared fixtures, a raw arq
``pool`` and a ``client``, are in this folder's conftest.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp.client import DEFAULT_TIMEOUT

from callgate.config import Settings
from callgate.services.ingress import queues
from callgate.standins.demo.http import ServiceProcess
from callgate.streams.arq import create_worker


def new_run_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


async def drain(settings: Settings) -> tuple[int, int]:
    """Run the public queue's ingress worker in burst mode; (jobs completed, jobs failed)."""
    worker = create_worker(settings, queues(settings)[0], "ingress", burst=True)
    try:
        await asyncio.wait_for(worker.async_run(), timeout=20)
    finally:
        await worker.close()
    return worker.jobs_complete, worker.jobs_failed


@asynccontextmanager
async def reset_session(
    service: ServiceProcess, timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT
) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP session, once ``service`` (a stand-in launched once per module) has forgotten
    what earlier tests did to it."""
    async with aiohttp.ClientSession(timeout=timeout) as http:
        async with http.post(f"{service.url}/_reset") as resp:
            assert resp.status == 200
        yield http
