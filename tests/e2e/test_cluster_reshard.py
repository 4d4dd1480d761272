"""A Redis Cluster resharded under load: the slots of a partition and of the public queue move
to another master while runs flow, and every run still completes with each call executed once.

While a slot's keys migrate, its old master answers ASK for a key already moved and TRYAGAIN
for a step whose keys are split; once the slot is given to the new master, the old one answers
MOVED.  The workers send such a command again once they have relearnt the slot map
(`callgate.ledger.pipeline`), and arq's connection follows its queue's slot
(`callgate.streams.arq_cluster`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from callgate.jobs import queue_name
from callgate.keys import Keys, slot_of
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.ops.embedded_redis import EmbeddedRedis
from tests.e2e.test_travel_pipeline import Stack, start_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
RUNS = 12
"""Travel runs submitted while the slots move (two calls each)."""


@pytest.fixture(scope="module")
def cluster_stack(redis_cluster: EmbeddedCluster) -> Iterator[Stack]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALLGATE_PARTITIONS", "3")  # the stack's client reads it as the workers do
        yield from start_stack(redis_cluster.cluster_url, 1)


async def test_runs_complete_once_while_a_partition_and_the_queue_move_to_another_master(
    redis_cluster: EmbeddedCluster, cluster_stack: Stack
) -> None:
    settings = cluster_stack.settings
    slots = [slot_of(Keys(settings.key_prefix, 3).tag(0)), slot_of(queue_name(settings))]
    before = [redis_cluster.master_of_slot(slot) for slot in slots]
    await cluster_stack.run("openai-responses", "travel-parallel", "warm up")

    async def move() -> None:
        for slot, old in zip(slots, before, strict=True):
            target = next(n for n in _masters(redis_cluster) if n.port != old.port)
            await asyncio.to_thread(redis_cluster.move_slot, slot, target, batch=5, pause_s=0.05)

    runs = [
        cluster_stack.run("openai-responses", "travel-parallel", f"trip {i}") for i in range(RUNS)
    ]
    views, _ = await asyncio.gather(asyncio.gather(*runs), move())

    assert [v["status"] for v in views] == ["completed"] * RUNS
    after = [redis_cluster.master_of_slot(slot).port for slot in slots]
    assert all(a != b.port for a, b in zip(after, before, strict=True)), "a slot did not move"
    stats = await cluster_stack.get(f"{cluster_stack.travel_url}/_stats")
    for endpoint in ("train_status", "weather"):
        # The warm-up and every run: each call executed exactly once.
        assert stats[endpoint]["requests"] == stats[endpoint]["executed"] == RUNS + 1, stats


def _masters(cluster: EmbeddedCluster) -> list[EmbeddedRedis]:
    return [n for n in cluster.live() if cluster.role_of(n) == "master"]
