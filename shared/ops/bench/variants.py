"""Throughput of the same pipeline under two other settings, beside the default run.

* ``throughput-redis-py``: the ledger's hot commands over plain redis-py
  (``CALLGATE_WIRE=redis-py``) instead of the bare hiredis connection: what the fast
  transport earns.
* ``throughput-aof``: a private Redis with the append-only file written and fsynced on every
  write (``appendfsync always``), the setting that makes a recorded intent survive a power
  cut (README: Performance), beside one that fsyncs once a second (``everysec``, Redis's
  default) on the same disk: what that durability costs.
* ``throughput-replica``: five turns of two idempotent writes (``bench_write``) on a private
  Redis with one replica, first with ``CALLGATE_WRITE_DURABILITY=none``, then ``replica``
  (every write's take waits for the replica to hold it, WAIT on the take's connection): what
  a write intent that survives a failover costs.
* ``throughput-tracing``: every worker tracing (``CALLGATE_TRACING=1``, every run sampled),
  exporting OTLP/HTTP to a receiver in this process that takes and drops what it is sent:
  what a span per model request, validation, tool call and run costs (README: Tracing).
* ``throughput-webhook-up`` / ``throughput-webhook-down``: the webhooks worker running with
  one endpoint, answered at once by a receiver in this process, or on a port where nothing
  listens (every delivery fails and is retried): whether a receiver that is down slows the
  loop (README: Webhooks).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from callgate.ops.bench import throughput
from callgate.ops.bench.harness import Deployment
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from callgate.ops.stack import Progress

WRITES = "bench-parallel-writes"
"""bench-parallel-writes.json: as the throughput scenario, with two writes a turn."""

VARIANTS = (
    "throughput-redis-py",
    "throughput-aof",
    "throughput-replica",
    "throughput-tracing",
    "throughput-webhook-up",
    "throughput-webhook-down",
)


async def measure(
    variant: str, redis_url: str, api: str, runs: int, progress: Progress
) -> dict[str, Any]:
    """Tool calls per second (and CPU per call) of ``runs`` runs under ``variant``."""
    if variant == "throughput-redis-py":
        env = {"CALLGATE_WIRE": "redis-py"}
        return await _pipeline(redis_url, env, api, runs, progress, variant)
    if variant == "throughput-tracing":
        return await _traced(redis_url, api, runs, progress, variant)
    if variant.startswith("throughput-webhook-"):
        return await _webhooks(redis_url, api, runs, progress, variant)
    if variant == "throughput-replica":
        return await _replicated(api, runs, progress, variant)
    everysec = await _durable("everysec", api, runs, progress, variant)
    always = await _durable("always", api, runs, progress, variant)
    return {
        **always,
        "everysec_calls_per_s": everysec["calls_per_s"],
        "everysec_cpu_ms_per_call": everysec["cpu_ms_per_call"],
        "always_vs_everysec": always["calls_per_s"] / everysec["calls_per_s"],
    }


async def _durable(
    fsync: str, api: str, runs: int, progress: Progress, name: str
) -> dict[str, Any]:
    """The pipeline on a private Redis writing its append-only file, fsynced ``fsync``."""
    aof = await asyncio.to_thread(EmbeddedRedis(appendonly=True, appendfsync=fsync).start)
    try:
        progress(f"{name}: private Redis, appendonly yes, appendfsync {fsync}")
        return await _pipeline(aof.url, {}, api, runs, progress, f"{name} ({fsync})")
    finally:
        await asyncio.to_thread(aof.__exit__, None, None, None)


async def _replicated(api: str, runs: int, progress: Progress, name: str) -> dict[str, Any]:
    """Writes on a private Redis with a replica in sync, without and with ``replica``
    durability."""
    master = await asyncio.to_thread(EmbeddedRedis().start)
    replica = await asyncio.to_thread(EmbeddedRedis().start)
    try:
        await asyncio.to_thread(replica.follow, master)
        progress(f"{name}: private Redis with one replica")
        figures = {
            mode: await _pipeline(
                master.url,
                {"CALLGATE_WRITE_DURABILITY": mode},
                api,
                runs,
                progress,
                f"{name} ({mode})",
                scenario=WRITES,
            )
            for mode in ("none", "replica")
        }
    finally:
        for server in (replica, master):
            await asyncio.to_thread(server.__exit__, None, None, None)
    none, confirmed = figures["none"], figures["replica"]
    return {
        **confirmed,
        "none_calls_per_s": none["calls_per_s"],
        "none_cpu_ms_per_call": none["cpu_ms_per_call"],
        "replica_vs_none": confirmed["calls_per_s"] / none["calls_per_s"],
        # Proof that the writes waited: a flush's takes share one WAIT.
        "waits_per_call": confirmed["redis_commands_per_call_by_command"].get("wait", 0.0),
    }


async def _pipeline(
    redis_url: str,
    env: dict[str, str],
    api: str,
    runs: int,
    progress: Progress,
    name: str,
    replicas: dict[str, int] | None = None,
    scenario: str = throughput.SCENARIO,
) -> dict[str, Any]:
    async with Deployment(redis_url, env=env, replicas=replicas, progress=progress) as deployment:
        progress(
            f"{name}: {runs} runs x {throughput.TURNS} turns x {throughput.CALLS_PER_TURN} calls"
        )
        measured = await throughput.pipeline(deployment, api, runs, scenario)
    wanted = (
        "calls",
        "seconds",
        "calls_per_s",
        "cpu_ms_per_call",
        "redis_commands_per_call",
        "redis_commands_per_call_by_command",
    )
    return {name: measured[name] for name in wanted}


async def _webhooks(
    redis_url: str, api: str, runs: int, progress: Progress, name: str
) -> dict[str, Any]:
    """The pipeline beside a webhooks worker posting every event to one endpoint: a receiver
    here that answers 200 at once (``-up``), or a port nobody listens on (``-down``)."""
    received = {"deliveries": 0}

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        received["deliveries"] += 1
        return web.Response(status=200)

    runner = web.AppRunner(web.Application(), access_log=None)
    runner.app.router.add_post("/hook", hook)
    await runner.setup()
    port = free_port()
    if name.endswith("-up"):
        await web.TCPSite(runner, "127.0.0.1", port).start()
    endpoint = {
        "name": "bench",
        "url": f"http://127.0.0.1:{port}/hook",
        "secret": "bench-" + "s" * 32,
    }
    env = {"CALLGATE_WEBHOOK_ENDPOINTS": json.dumps([endpoint])}
    try:
        figures = await _pipeline(redis_url, env, api, runs, progress, name, {"webhooks": 1})
    finally:
        await runner.cleanup()
    return {**figures, **received}


async def _traced(
    redis_url: str, api: str, runs: int, progress: Progress, name: str
) -> dict[str, Any]:
    """The pipeline with every worker tracing to a local OTLP/HTTP receiver that drops what
    it gets (the collector's own cost is not the workers')."""
    received = {"requests": 0, "bytes": 0}

    async def traces(request: web.Request) -> web.Response:
        received["requests"] += 1
        received["bytes"] += len(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    env = {
        "CALLGATE_TRACING": "1",
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
    }
    try:
        figures = await _pipeline(redis_url, env, api, runs, progress, name)
    finally:
        await runner.cleanup()
    return {**figures, "otlp_requests": received["requests"], "otlp_bytes": received["bytes"]}
