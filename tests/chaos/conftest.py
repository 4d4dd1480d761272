"""One deployment for the hostile-input tests: travel and booking services, the scripted model,
one replica of every worker, carol as the events-lead approver (the session's keyring), a
planted API key in every process's environment, and a low argument-size limit (so an
oversized call fits a scenario)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.envelopes import EnvelopeBase, encode
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.records import CallRecord, Event
from callgate.tools.registry import load_registry

PLANTED_API_KEY = f"sk-planted-{uuid.uuid4().hex}"
"""What the workers hold as their provider API key; the scripted model ignores keys."""
MAX_ARGUMENT_BYTES = 512


class Deployment:
    def __init__(self, system: LocalSystem) -> None:
        self.system = system
        self.settings: Settings = system.settings
        self.keys = Keys(self.settings.key_prefix, self.settings.partitions)

    async def http(self, service: str, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.system.urls[service]}{path}"
        async with aiohttp.ClientSession() as http, http.request(method, url, json=body) as r:
            return await r.json()

    async def submit(self, scenario: str, tools: list[str], **extra: Any) -> str:
        spec = {
            "api": "openai-chat",
            "model": scenario,
            "input": "hello",
            "identity": {"user": "alice"},
            "max_turns": 4,
            "allowed_tools": list(load_registry(tools).names()),
            **extra,
        }
        async with CallgateClient(self.settings) as client:
            return await client.submit(spec)  # fmt: skip

    async def settle(self, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
        """Wait until the run is terminal or paused; its view (run and calls)."""
        async with CallgateClient(self.settings) as client:
            await client.wait(run_id, timeout_s)
            return await client.view(run_id)

    async def run(self, scenario: str, tools: list[str], **extra: Any) -> dict[str, Any]:
        return await self.settle(await self.submit(scenario, tools, **extra))

    async def events(self, run_id: str) -> list[Event]:
        async with CallgateClient(self.settings) as client:
            return await client.events(run_id)

    async def call(self, run_id: str, call_id: str) -> CallRecord:
        redis = aioredis.Redis.from_url(self.settings.redis_url)
        try:
            found = await Ledger(redis, self.keys, self.settings).get_call(run_id, call_id)
        finally:
            await redis.aclose()
        assert found is not None
        return found

    async def post(self, kind: str, message: EnvelopeBase) -> None:
        """XADD ``message`` onto the run's ``kind`` stream, as anyone with Redis access can."""
        await self.post_raw(kind, message.run_id, encode(message))

    async def post_raw(self, kind: str, run_id: str, data: bytes) -> None:
        redis = aioredis.Redis.from_url(self.settings.redis_url)
        try:
            await redis.xadd(self.keys.run_stream(kind, run_id), {"d": data})
        finally:
            await redis.aclose()

    def worker_logs(self) -> list[str]:
        workers = [n for names in self.system.workers.values() for n in names]
        return [line for name in workers for line in self.system.supervisor.tail(name)]


@pytest.fixture(scope="package")
def deployment(redis_server: EmbeddedRedis) -> Iterator[Deployment]:
    spec = SystemSpec(
        services=("travel", "booking"),
        scripted_model=True,
        redis_url=redis_server.url,
        env={
            "CALLGATE_MAX_ARGUMENT_BYTES": str(MAX_ARGUMENT_BYTES),
            "CALLGATE_CLAIM_IDLE_MS": "1000",
            "OPENAI_API_KEY": PLANTED_API_KEY,
            "ANTHROPIC_API_KEY": PLANTED_API_KEY,
        },
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        yield Deployment(system)


@pytest.fixture
async def fresh(deployment: Deployment) -> Deployment:
    """The deployment with the demo services' stats and faults and the model's log cleared."""
    for service in ("travel", "booking", "model"):
        await deployment.http(service, "POST", "/_reset")
    return deployment
