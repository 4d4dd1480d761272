"""Redis goes away and comes back — stopped for two seconds and started again (AOF on), and,
separately, every client connection killed — while runs are in flight: the workers reconnect
in place (none exits, none is restarted) and every run completes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from callgate.ops.chaos.workload import APIS
from callgate.ops.system import LocalSystem, SystemSpec
from tests.chaos.conftest import Deployment

SLOW = {"delay_s": 1.0}
"""Travel answers take a second, so calls are in flight when Redis goes away."""
DOWN_S = 2.0


@pytest.fixture(scope="module")
def system() -> Iterator[LocalSystem]:
    spec = SystemSpec(services=("travel",), scripted_model=True, redis="private_aof",
                      env={"CALLGATE_CLAIM_IDLE_MS": "1000"}, grace_s=3.0)  # fmt: skip
    with LocalSystem(spec) as running:
        yield running


async def in_flight(deployment: Deployment, count: int) -> list[str]:
    """Submit ``count`` runs and return once one of them is executing its calls."""
    runs = [
        await deployment.submit(
            "travel-parallel", ["callgate.standins.demo.travel"], api=APIS[i % 3]
        )
        for i in range(count)
    ]
    redis = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        for _ in range(600):
            statuses = [await redis.hget(deployment.keys.run(r), "status") for r in runs]
            if b"executing" in statuses:
                return runs
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    raise AssertionError("no run reached its calls")


async def test_workers_reconnect_after_redis_restarts_and_connections_drop(
    system: LocalSystem,
) -> None:
    deployment = Deployment(system)
    await deployment.http("travel", "POST", "/_config", {"weather": SLOW, "train_status": SLOW})
    assert system.redis is not None
    first = await in_flight(deployment, 6)
    await asyncio.to_thread(system.redis.stop)
    await asyncio.sleep(DOWN_S)  # long enough for every client's own retries to give up
    await asyncio.to_thread(system.redis.start)

    second = await in_flight(deployment, 6)
    admin = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        killed = await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    finally:
        await admin.aclose()
    assert int(killed) >= len(system.workers)  # at least one connection per worker

    for run_id in first + second:
        view = await deployment.settle(run_id, timeout_s=90)
        assert view["status"] == "completed", view
        assert [c["state"] for c in view["calls"]] == ["succeeded", "succeeded"]
    workers = [n for names in system.workers.values() for n in names]
    assert {n: system.supervisor.restarts[n] for n in workers} == dict.fromkeys(workers, 0)
