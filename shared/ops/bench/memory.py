"""Scenario 5: Redis bytes per finished run, before and after retention; worker RSS over many runs.

Bytes are counted key by key (``MEMORY USAGE … SAMPLES 0``) under the deployment's own key
prefix plus the arq job results of its runs, so the figure is right on a shared Redis too.
A run's own keys carry its run id; everything else under the prefix (the hot-path streams,
indexes) is shared, and its growth over the batch is divided among the batch's runs.

Runs are three turns (a call, a call, the answer) with raw responses kept.  The deployment
runs with a short ``CALLGATE_RETENTION_S`` so the benchmark can wait for it to pass.  Stream
entries are trimmed once every group acked them, so the shared part of a finished run is
transient; a shrinking shared part counts as zero, never as a negative.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from callgate.connect import RedisClient
from callgate.ops.bench.harness import Deployment, run_spec
from callgate.ops.stack import Progress

SCENARIO = "three-turns"
TIMEOUT_S = 600.0
SCAN_COUNT = 1000
SETTLE_EXTRA_S = 30.0
"""How long past the retention to wait for sweeps (index pruning, stream trimming)."""


@dataclass(frozen=True)
class Usage:
    """Bytes of one batch's own keys, and of everything shared under the prefix."""

    own: int
    shared: int
    own_keys: int


async def _usage_of(redis: RedisClient, names: list[bytes]) -> list[int]:
    sizes: list[int] = []
    for start in range(0, len(names), SCAN_COUNT):
        async with redis.pipeline(transaction=False) as pipe:
            for name in names[start : start + SCAN_COUNT]:
                pipe.memory_usage(name, samples=0)
            sizes += [int(size or 0) for size in await pipe.execute()]
    return sizes


async def usage(deployment: Deployment, run_ids: set[str]) -> Usage:
    """What the batch ``run_ids`` holds now, and what the prefix holds besides any run."""
    assert deployment.redis is not None
    redis = deployment.redis
    prefix = deployment.keys.prefix
    names = [name async for name in redis.scan_iter(f"{prefix}:*", count=SCAN_COUNT)]
    names += [f"arq:result:{run_id}".encode() for run_id in run_ids]
    sizes = await _usage_of(redis, names)
    own = shared = own_keys = 0
    for name, size in zip(names, sizes, strict=True):
        run_id = _run_of(name.decode())
        if run_id is None:
            shared += size
        elif run_id in run_ids:  # other runs' keys (the warm-up's) count nowhere
            own += size
            own_keys += size > 0
    return Usage(own, shared, own_keys)


def _run_of(key: str) -> str | None:
    """The run id in a run's key (``<prefix>:{p}:<kind>:<run_id>[:…]``, ``arq:result:<id>``);
    None for shared keys.  Benchmark run ids are minted by the client: ``run-<hex>``."""
    parts = key.split(":")
    if parts[:2] == ["arq", "result"]:
        return parts[2]
    return parts[3] if len(parts) >= 4 and parts[3].startswith("run-") else None


async def measure(
    deployment: Deployment, api: str, runs: int, rss_runs: int, retention_s: int, progress: Progress
) -> dict[str, Any]:
    """``deployment`` must run with ``CALLGATE_RETENTION_S=retention_s``."""
    spec = run_spec(api, f"bench-{SCENARIO}")
    await deployment.run_batch(spec, runs, TIMEOUT_S)  # warm-up: groups, caches
    before = await usage(deployment, set())
    progress(f"memory: {runs} three-turn runs")
    records, _ = await deployment.run_batch(spec, runs, TIMEOUT_S)
    batch = {r.run_id for r in records}
    finished = await usage(deployment, batch)
    progress(f"memory: waiting for the {retention_s}s retention to pass")
    retained = await _after_retention(deployment, batch, retention_s)
    shared = max(0, finished.shared - before.shared)
    return {
        "runs": runs,
        "retention_s": retention_s,
        "bytes_per_run": (finished.own + shared) / runs,
        "own_bytes_per_run": finished.own / runs,
        "shared_bytes_per_run": shared / runs,
        "bytes_per_run_after_retention": (retained.own + max(0, retained.shared - before.shared))
        / runs,
        "keys_left_after_retention": retained.own_keys,
        **await _rss(deployment, spec, runs, rss_runs, progress),
    }


async def _after_retention(deployment: Deployment, batch: set[str], retention_s: int) -> Usage:
    """Usage once the batch's keys expired and the shared part stopped shrinking (bounded)."""
    await asyncio.sleep(retention_s)
    deadline = time.monotonic() + SETTLE_EXTRA_S
    last = await usage(deployment, batch)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = await usage(deployment, batch)
        if now.own == 0 and now.shared >= last.shared:
            return now
        last = now
    return last


async def _rss(
    deployment: Deployment, spec: dict[str, Any], runs: int, rss_runs: int, progress: Progress
) -> dict[str, Any]:
    """Every worker's RSS before and after ``rss_runs`` more runs, ``runs`` at a time."""
    before = deployment.worker_rss()
    done = 0
    while done < rss_runs:
        wave = min(runs, rss_runs - done)
        await deployment.run_batch(spec, wave, TIMEOUT_S)
        done += wave
        if done % (runs * 10) == 0 or done == rss_runs:
            progress(f"memory: {done} of {rss_runs} runs for RSS")
    after = deployment.worker_rss()
    growth = {name: after[name] / before[name] - 1 for name in before if name in after}
    return {
        "rss_runs": rss_runs,
        "rss_before": before,
        "rss_after": after,
        "rss_growth_max": max(growth.values(), default=0.0),
    }
