"""The ledger's pipeline on a Redis Cluster: each flush goes one pipeline per slot, to that
slot's master, and every request is answered — a request of no commands (a read of no
records) included, which once left the whole flush's callers waiting for ever."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from callgate.connect import redis_client
from callgate.keys import Keys
from callgate.ledger.pipeline import AutoPipeline
from callgate.ops.embedded_cluster import EmbeddedCluster

pytestmark = pytest.mark.timeout(30)


async def test_every_request_of_a_flush_over_three_slots_is_answered(
    redis_cluster: EmbeddedCluster,
) -> None:
    redis = redis_client(redis_cluster.cluster_url)
    keys = Keys(f"t{uuid.uuid4().hex[:8]}", 3)
    runs = [f"run-{p}" for p in range(12)]
    for run_id in runs:
        await redis.hset(keys.run(run_id), "status", run_id)
    pipe = AutoPipeline(redis)
    try:
        requests = [pipe.send([("hget", keys.run(run_id), "status")]) for run_id in runs]
        nothing = pipe.send([])
        replies = await asyncio.wait_for(asyncio.gather(*requests, nothing), 5)
    finally:
        await pipe.aclose()
        await redis.aclose()
    assert replies == [[run_id.encode()] for run_id in runs] + [[]]
    assert len({keys.partition(run_id) for run_id in runs}) == 3
