"""A consumer's own reclaim against a real Redis: a message it settled while its XAUTOCLAIM
was on the wire is not run a second time (once, in CI, a Slack approval was posted twice)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.envelopes import Envelope, TurnRequest, encode
from callgate.streams import worker as worker_module
from callgate.streams.worker import Delivery, StreamWorker

pytestmark = pytest.mark.timeout(30)


async def test_a_message_acked_while_our_claim_is_read_is_not_run_again(
    redis: aioredis.Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No heartbeat: the message goes idle while its handler runs, so our own claim takes it.
    quiet = settings.model_copy(update={"heartbeat_ms": 60_000, "claim_idle_ms": 100})
    stream = f"{settings.key_prefix}:work"
    await redis.xadd(stream, {"d": encode(TurnRequest(run_id="r", turn=1))})
    runs = 0
    claimed = asyncio.Event()

    async def handler(envelope: Envelope, delivery: Delivery) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            await claimed.wait()  # finish only once our own XAUTOCLAIM has taken the message

    read_counts = worker_module.delivery_counts

    async def acked_before_the_claim_is_read(
        client: aioredis.Redis, name: str, group: str, consumer: str, ids: list[str]
    ) -> dict[str, int]:
        if ids and not claimed.is_set():
            claimed.set()  # the handler returns and its ack lands meanwhile
            while (await client.xpending(name, group))["pending"]:
                await asyncio.sleep(0.01)
        return await read_counts(client, name, group, consumer, ids)

    monkeypatch.setattr(worker_module, "delivery_counts", acked_before_the_claim_is_read)
    consumer = StreamWorker(redis, quiet, group="g", streams=[stream], handler=handler)

    settled = await asyncio.wait_for(consumer.run_burst(), 20)

    assert claimed.is_set(), "the claim never took the running message"
    assert (runs, settled) == (1, 1)
