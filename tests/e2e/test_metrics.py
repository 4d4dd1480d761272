"""`/metrics` after real runs: every worker, the webhooks worker (which keeps the event counters),
and `metrics_route` in a Starlette app served over HTTP by uvicorn, as the HTTP API mounts it,
scraped and parsed as Prometheus would."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.decisions.desk import ApprovalDesk
from callgate.metrics.export import MetricsApp, metrics_route
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from callgate.ops.stack import worker_argv
from callgate.ops.system import LocalSystem
from tests.e2e.people import approve, deployment, http, status, until

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    for running in deployment(redis_server, ("booking",)):
        running.supervisor.start("webhooks", worker_argv("webhooks"), running.env)
        yield running


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[str]:
    endpoint = MetricsApp(settings)
    route = metrics_route(endpoint)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[route]),
            host="127.0.0.1",
            port=port,
            lifespan="off",
            log_level="warning",
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await endpoint.aclose()


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(url) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        text = await reply.text()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def deny(system: LocalSystem, client: CallgateClient, run_id: str) -> None:
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.approval_id is not None
    record = await client.ledger.get_approval(run_id, call.approval_id)
    assert record is not None
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    await desk.post(record, "deny", signer_of(system.settings, "carol"))


async def test_metrics_after_real_runs_count_runs_calls_waits_and_pending(
    system: LocalSystem,
) -> None:
    await http(system, "booking", "POST", "/_reset")
    async with CallgateClient(system.settings) as client:
        runs = []
        for decide in (approve, deny):
            run_id = await client.submit(
                {
                    "api": "anthropic-messages",
                    "model": "conf-reserve",
                    "input": "book",
                    "identity": {"user": "alice"},
                    "allowed_tools": ["reserve_seat"],
                }
            )
            await until(client, run_id, status("paused_approval"))
            await decide(system, client, run_id)
            await until(client, run_id, status("completed"))
            runs.append(run_id)
        # A consumer group of our own on the notify stream (which holds the two approval
        # notices nobody here reads): one entry taken and not acked, one not yet delivered.
        notify = client.keys.stream("notify", 0)
        await client.redis.xgroup_create(notify, "probe", id="0")
        await client.redis.xreadgroup("probe", "probe-1", {notify: ">"}, count=1)

    async with served(system.settings) as url:
        deadline = time.monotonic() + 20
        samples = await scrape(url)
        while value(samples, "callgate_runs_finished_total", status="completed") != 2:
            assert time.monotonic() < deadline, "the webhooks worker did not count both runs"
            await asyncio.sleep(0.2)
            samples = await scrape(url)

    assert value(samples, "callgate_runs", status="completed") == 2
    assert value(samples, "callgate_runs_sampled") == 2
    assert value(samples, "callgate_calls_total", tool="reserve_seat", outcome="succeeded") == 1
    assert value(samples, "callgate_calls_total", tool="reserve_seat", outcome="denied") == 1
    for decision in ("approved", "denied"):
        assert value(samples, "callgate_approval_wait_seconds_count", decision=decision) == 1
        assert (
            value(samples, "callgate_approval_wait_seconds_bucket", decision=decision, le="+Inf")
            == 1
        )
    probe = {"stream": "notify", "partition": "0", "group": "probe"}
    assert value(samples, "callgate_stream_pending", **probe) == 1
    assert value(samples, "callgate_stream_lag", **probe) == 1
    for stream, group in (
        ("turns", "model_turn"),
        ("validate", "validator"),
        ("exec", "executor"),
        ("results", "model_turn"),
    ):
        assert (
            value(samples, "callgate_stream_pending", stream=stream, partition="0", group=group)
            == 0
        ), (stream, group)
    assert value(samples, "callgate_dead_letters", partition="0") == 0
