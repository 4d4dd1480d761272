"""Scenario ``http``: the HTTP API's two costs — submitting through ``POST /runs`` beside the
arq path it wraps, and how soon a committed step reaches a Server-Sent Events client.

Submission: ``runs`` runs submitted with `CallgateClient.submit` (arq, as a Python service does),
then as many through ``POST /runs`` (32 requests in flight, as `Deployment.submit` keeps 32
submissions in flight); each rate is runs accepted per second, and every batch is then waited
for, so a rate never counts runs the ingress refused.  SSE latency: a client follows a run of
many one-call turns; each event's latency is the time it reached the client minus the Redis
clock in its stream id (the moment its step committed), both on this machine's clock.  Events
already committed when the stream opened are not counted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from callgate.auth.keyring import LocalKeyring, default_home
from callgate.auth.tokens import sign_access
from callgate.envelopes import new_id
from callgate.ops.bench.harness import SUBMIT_CONCURRENCY, Deployment, run_spec
from callgate.ops.bench.report import percentile
from callgate.ops.dev_cli import start_api
from callgate.ops.stack import Progress

SUBMITTED = "bench-three-turns"
FOLLOWED = "bench-latency"
"""50 one-call turns: long enough that the stream is open before most steps commit."""
TIMEOUT_S = 300.0


async def submit_rates(
    deployment: Deployment, url: str, token: str, api: str, runs: int
) -> tuple[float, float]:
    """(runs/s through arq, runs/s through ``POST /runs``), each batch waited for."""
    spec = run_spec(api, SUBMITTED)
    started = time.perf_counter()
    arq_ids = await deployment.submit(spec, runs)
    arq_s = time.perf_counter() - started
    await deployment.wait_settled(arq_ids, TIMEOUT_S)
    gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)
    headers = {"Authorization": f"Bearer {token}"}

    async def one(http: aiohttp.ClientSession) -> str:
        async with gate, http.post(f"{url}/runs", json=spec, headers=headers) as reply:
            body = await reply.json()
            if reply.status != 202:
                raise RuntimeError(f"POST /runs answered {reply.status}: {body}")
            return str(body["run_id"])

    async with aiohttp.ClientSession() as http:
        started = time.perf_counter()
        api_ids = await asyncio.gather(*(one(http) for _ in range(runs)))
        api_s = time.perf_counter() - started
    await deployment.wait_settled(list(api_ids), TIMEOUT_S)
    return runs / arq_s, runs / api_s


async def sse_latency_ms(url: str, token: str, api: str, scenario: str) -> list[float]:
    """Commit → client latency of every event of one run, as an SSE client sees it."""
    spec = {**run_spec(api, scenario), "run_id": f"run-bench-{new_id()}"}
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as http:
        async with http.post(f"{url}/runs", json=spec, headers=headers) as reply:
            assert reply.status == 202, await reply.text()
        path = f"{url}/runs/{spec['run_id']}/events"
        while True:  # the ingress creates the run a moment after the job is accepted
            async with http.get(path, headers=headers) as probe:
                if probe.status == 200:
                    break
            await asyncio.sleep(0.01)
        return await _follow(http, path, {**headers, "Accept": "text/event-stream"})


async def _follow(http: aiohttp.ClientSession, path: str, headers: dict[str, str]) -> list[float]:
    samples: list[float] = []
    async with http.get(path, headers=headers) as stream:
        opened_ms = time.time() * 1000
        async for raw in stream.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: end"):
                break
            if line.startswith("id: "):
                committed_ms = int(line[4:].split("-")[0])
                if committed_ms >= opened_ms:
                    samples.append(time.time() * 1000 - committed_ms)
    return samples


async def measure(redis_url: str, api: str, runs: int, progress: Progress) -> dict[str, Any]:
    """Both figures on one in-process deployment with the API server in front of it."""
    async with Deployment(redis_url, progress=progress) as deployment:
        home = deployment.system.env.get("CALLGATE_HOME")
        keyring = LocalKeyring(Path(home) if home else default_home())
        if not keyring.key_path("api").exists():
            keyring.new_key("api")  # the server's delegate key: it signs no decision here, so
            # the trust file is left alone
        url = await asyncio.to_thread(start_api, deployment.system)
        token = sign_access(keyring.signer("local"))
        progress(f"http: {runs} runs submitted through arq, then through POST /runs")
        arq_rate, api_rate = await submit_rates(deployment, url, token, api, runs)
        progress(f"http: SSE latency over one {FOLLOWED} run")
        samples = await sse_latency_ms(url, token, api, FOLLOWED)
    return {
        "arq_runs_per_s": arq_rate,
        "api_runs_per_s": api_rate,
        "api_vs_arq": api_rate / arq_rate if arq_rate else float("nan"),
        "sse_events": len(samples),
        "sse_p50_ms": percentile(samples, 50),
        "sse_p99_ms": percentile(samples, 99),
        "sse_samples_ms": samples,
    }
