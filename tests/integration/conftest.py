"""Fixtures the integration tests share: a callgate client, a raw arq pool, a fake Slack, a
worker's runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from arq.connections import ArqRedis, create_pool

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.jobs import job_deserializer, job_serializer, queue_name, redis_settings
from callgate.standins.fake_slack import FakeSlack
from callgate.streams.service import Runtime, build_runtime
from tests.slack_clicks import fake_slack


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[CallgateClient]:
    async with CallgateClient(settings) as c:
        yield c


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[ArqRedis]:
    """A raw arq pool: what any client may enqueue, without callgate's client checks."""
    p = await create_pool(
        redis_settings(settings),
        job_serializer=job_serializer,
        job_deserializer=job_deserializer,
        default_queue_name=queue_name(settings),
    )
    try:
        yield p
    finally:
        await p.aclose()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    """The fake Slack Web API the Slack bot's tests post to."""
    async with fake_slack() as server:
        yield server


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    """What a worker process builds at start (Redis client, ledger, registry, trust)."""
    rt = build_runtime("test", settings)
    try:
        yield rt
    finally:
        await rt.close()
