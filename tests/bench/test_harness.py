"""The benchmark harness's wait for a batch: it must keep the record of every run that
settled, even when retention expires it before the batch's last run ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.bench.harness import Deployment
from callgate.records import RunRecord
from callgate.states import RunState
from tests.seed import seed


@pytest.fixture
async def deployment(settings: Settings) -> AsyncIterator[Deployment]:
    """A deployment whose client is on the test's Redis and prefix; no worker starts."""
    d = Deployment(settings.redis_url, progress=lambda _: None)
    d.client = CallgateClient(settings)
    d.redis = d.client.redis
    try:
        yield d
    finally:
        await d.client.close()


async def _new_run(client: CallgateClient, status: RunState) -> str:
    run = RunRecord(
        run_id=f"run-wait-{status.value}",
        status=status,
        api="openai-responses",
        model="bench",
        input="bench",
    )
    await seed(client.ledger, run)
    return run.run_id


async def test_a_settled_run_expired_before_the_last_one_ends_is_still_reported(
    deployment: Deployment,
) -> None:
    assert deployment.client is not None
    ledger = deployment.client.ledger
    first = await _new_run(deployment.client, RunState.COMPLETED)
    last = await _new_run(deployment.client, RunState.EXECUTING)
    waiting = asyncio.create_task(deployment.wait_settled([first, last], timeout_s=10))
    await asyncio.sleep(0.3)  # a few polls: the first run is seen settled, the last is not
    assert not waiting.done()
    await deployment.redis.delete(ledger.keys.run(first))  # retention expires the first run
    await deployment.redis.hset(ledger.keys.run(last), "status", RunState.COMPLETED.value)

    records = await asyncio.wait_for(waiting, timeout=5)

    assert [(r.run_id, r.status) for r in records] == [
        (first, RunState.COMPLETED),
        (last, RunState.COMPLETED),
    ]


async def test_a_batch_that_does_not_settle_in_time_says_how_many_are_left(
    deployment: Deployment,
) -> None:
    assert deployment.client is not None
    running = await _new_run(deployment.client, RunState.EXECUTING)

    with pytest.raises(TimeoutError, match="1 of 1 runs still running"):
        await deployment.wait_settled([running], timeout_s=0.3)
