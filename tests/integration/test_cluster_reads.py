"""A stream worker on a Redis Cluster reads every partition's stream, each in its own slot, with
one XREADGROUP per slot (one across them is CROSSSLOT), and with fewer free slots than
partitions it still serves them all, wave after wave (`SlotReads`)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from callgate.config import Settings
from callgate.connect import redis_client
from callgate.envelopes import Envelope, TurnRequest, encode
from callgate.keys import Keys
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.streams.worker import Delivery, StreamWorker

pytestmark = pytest.mark.timeout(60)
PARTITIONS = 3
WAVES = 6


async def test_a_worker_with_one_slot_serves_every_partitions_stream_on_a_cluster(
    redis_cluster: EmbeddedCluster,
) -> None:
    settings = Settings(
        redis_url=redis_cluster.cluster_url,
        key_prefix=f"t{uuid.uuid4().hex[:8]}",
        partitions=PARTITIONS,
        concurrency=1,
        read_block_ms=50,
        claim_idle_ms=60_000,  # nothing may be handled by being reclaimed
    )
    keys = Keys(settings.key_prefix, PARTITIONS)
    streams = keys.streams("turns")
    redis = redis_client(settings.redis_url)
    handled: list[str] = []

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        await asyncio.sleep(0.05)
        handled.append(envelope.msg_id)

    worker = StreamWorker(redis, settings, group="g", streams=streams, handler=handler)
    serving = asyncio.create_task(worker.run())
    sent: list[str] = []
    try:
        for _ in range(WAVES):
            await asyncio.sleep(0.3)
            for stream in streams:
                message = TurnRequest(run_id="run-1", turn=1)
                await redis.xadd(stream, {"d": encode(message)})
                sent.append(message.msg_id)
        deadline = time.monotonic() + 20
        while len(handled) < len(sent) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sorted(handled) == sorted(sent), f"{len(handled)} of {len(sent)} handled"
    finally:
        await worker.shutdown()
        await serving
        await redis.aclose()
