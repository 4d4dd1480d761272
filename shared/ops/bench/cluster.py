"""``throughput-cluster``: the write pipeline on a private Redis Cluster, beside one node.

Three legs, each a deployment of its own running the throughput scenario's writes (five turns
of two idempotent ``bench_write`` calls, bench-parallel-writes.json) with the runs spread over
three partitions (``CALLGATE_PARTITIONS=3``):

* ``one_node``: the benchmark's own Redis (one server; the partitions all on it);
* ``cluster``: a private `EmbeddedCluster` (three masters, a replica each), each partition on
  a master of its own, ``CALLGATE_WRITE_DURABILITY=none``;
* ``cluster_replica``: the same cluster with ``replica`` durability (after a flush's write
  takes, ``WAIT 1`` on each master they went to).

As ``redis-cli --cluster create`` splits the slots, ``{p0}`` and ``{p1}`` fall on the same
master and the first master holds no partition, so before the legs run the scenario moves the
(still empty) slots of the partitions' tags until each partition has a master of its own
(`EmbeddedCluster.spread`).

The legs run one after another, ``repeats`` times (one cluster for all), every other repeat
in the reverse order, so a machine whose speed drifts moves every leg alike and a leg's place
in the order favours none; each figure is the median of its repeats with their range, each
ratio the median of the repeats' own ratios.

On a cluster a client's ``INFO`` answers for one master and ``MONITOR`` watches one server, so
Redis's CPU and command counts per call (and the CPU total they are part of) are given for the
one-node leg only; every leg gives the workers' CPU (read from /proc) and the WAITs the
masters ran (their ``INFO commandstats``, summed), which show that only the replica leg waited.
"""

from __future__ import annotations

import asyncio
import statistics
import textwrap
from collections.abc import Sequence
from typing import Any

from callgate.connect import ClusterClient, RedisClient
from callgate.ops.bench import throughput
from callgate.ops.bench.harness import Deployment
from callgate.ops.bench.variants import WRITES
from callgate.ops.embedded_cluster import EmbeddedCluster, find_redis_cli
from callgate.ops.stack import Progress

NAME = "throughput-cluster"
PARTITIONS = 3
"""As many as the cluster has masters: one each (`EmbeddedCluster.spread`)."""
LEGS: dict[str, tuple[bool, str]] = {
    "one_node": (False, "none"),
    "cluster": (True, "none"),
    "cluster_replica": (True, "replica"),
}
"""Leg → (on the cluster, ``CALLGATE_WRITE_DURABILITY``), in the order odd repeats run them."""
EVERY_LEG = (
    "calls",
    "seconds",
    "calls_per_s",
    "workers_cpu_ms_per_call",
    "runtime_cpu_ms_per_call",
)
ONE_SERVER = ("cpu_ms_per_call", "redis_cpu_us_per_call", "redis_commands_per_call")
"""Figures read from one server's INFO: given for the one-node leg only."""
NOT_ON_CLUSTER = (
    "Not on the cluster legs: Redis CPU and commands per call, and so the CPU total of every "
    "process, are read from one server's INFO, which on a cluster is one master's."
)


async def measure(
    redis_url: str, api: str, runs: int, repeats: int, progress: Progress
) -> dict[str, Any]:
    """Calls/s of ``runs`` runs in each leg, ``repeats`` times interleaved, and the ratios."""
    try:
        find_redis_cli()
    except RuntimeError as exc:
        progress(f"{NAME}: {exc}; skipped")
        return {"skipped": str(exc)}
    progress(f"{NAME}: starting a private Redis Cluster (3 masters, a replica each)")
    cluster = await asyncio.to_thread(EmbeddedCluster().start)
    samples: dict[str, list[dict[str, Any]]] = {leg: [] for leg in LEGS}
    try:
        masters = await asyncio.to_thread(cluster.spread, PARTITIONS)
        progress(f"{NAME}: partitions 0-{PARTITIONS - 1} on the masters at ports {masters}")
        urls = {False: redis_url, True: cluster.cluster_url}
        for repeat in range(1, repeats + 1):
            order = list(LEGS) if repeat % 2 else list(reversed(LEGS))
            for leg in order:
                on_cluster, durability = LEGS[leg]
                name = f"{NAME} ({leg}, {repeat}/{repeats})"
                figures = await _leg(
                    urls[on_cluster], on_cluster, durability, api, runs, progress, name
                )
                samples[leg].append(figures)
    finally:
        await asyncio.to_thread(cluster.stop)
    return {**summary(samples, runs), "partition_masters": masters}


async def _leg(
    url: str, on_cluster: bool, durability: str, api: str, runs: int, progress: Progress, name: str
) -> dict[str, Any]:
    env = {"CALLGATE_PARTITIONS": str(PARTITIONS), "CALLGATE_WRITE_DURABILITY": durability}
    async with Deployment(url, env=env, progress=progress) as deployment:
        assert deployment.redis is not None
        progress(
            f"{name}: {runs} runs x {throughput.TURNS} turns x "
            f"{throughput.CALLS_PER_TURN} writes, durability {durability}"
        )
        waits = await _masters_waits(deployment.redis)
        measured = await throughput.pipeline(deployment, api, runs, WRITES)
        waits = await _masters_waits(deployment.redis) - waits
    kept = EVERY_LEG if on_cluster else (*EVERY_LEG, *ONE_SERVER)
    figures = {key: measured[key] for key in kept}
    # Around the warm-up run too, which writes nothing: only write takes wait.
    figures["waits_per_call"] = waits / measured["calls"]
    progress(f"{name}: {figures['calls_per_s']:,.0f} calls/s")
    return figures


async def _masters_waits(redis: RedisClient) -> int:
    """WAITs run so far by the one server, or by every master of a cluster together."""
    if isinstance(redis, ClusterClient):
        by_node = await redis.info("commandstats", target_nodes=ClusterClient.PRIMARIES)
        stats = list(by_node.values())
    else:
        stats = [await redis.info("commandstats")]
    return sum(int(node.get("cmdstat_wait", {}).get("calls", 0)) for node in stats)


def summary(samples: dict[str, list[dict[str, Any]]], runs: int) -> dict[str, Any]:
    """Each leg's calls/s and the two ratios: median and range over the repeats."""
    rates = {leg: [s["calls_per_s"] for s in samples[leg]] for leg in LEGS}
    out: dict[str, Any] = {
        "runs": runs,
        "repeats": len(rates["one_node"]),
        "partitions": PARTITIONS,
        "scenario": WRITES,
    }
    for leg in LEGS:
        out.update(_spread(f"{leg}_calls_per_s", rates[leg]))
        cpu = [s["workers_cpu_ms_per_call"] for s in samples[leg]]
        out.update(_spread(f"{leg}_workers_cpu_ms_per_call", cpu))
    out.update(_spread("cluster_vs_one_node", _ratios(rates["cluster"], rates["one_node"])))
    out.update(_spread("replica_vs_none", _ratios(rates["cluster_replica"], rates["cluster"])))
    waits = [s["waits_per_call"] for s in samples["cluster_replica"]]
    out.update(_spread("replica_waits_per_call", waits))
    out["legs"] = samples
    out["not_on_cluster"] = NOT_ON_CLUSTER
    return out


def _ratios(over: Sequence[float], under: Sequence[float]) -> list[float]:
    return [a / b if b else float("nan") for a, b in zip(over, under, strict=True)]


def _spread(name: str, values: Sequence[float]) -> dict[str, Any]:
    return {name: statistics.median(values), f"{name}_range": [min(values), max(values)]}


ROWS = (
    ("one_node_calls_per_s", "one node, 3 partitions (calls/s)"),
    ("cluster_calls_per_s", "cluster, 3 masters, durability none (calls/s)"),
    ("cluster_replica_calls_per_s", "cluster, durability replica (calls/s)"),
    ("cluster_vs_one_node", "  cluster / one node"),
    ("replica_vs_none", "  replica / none, on the cluster"),
    ("replica_waits_per_call", "  WAITs per tool call, replica"),
    ("one_node_workers_cpu_ms_per_call", "workers' CPU per tool call, one node (ms)"),
    ("cluster_workers_cpu_ms_per_call", "  cluster, durability none (ms)"),
    ("cluster_replica_workers_cpu_ms_per_call", "  cluster, durability replica (ms)"),
)


def table(figures: dict[str, Any]) -> str:
    """The legs' medians and ranges, as `callgate bench` prints them after its table."""
    if "skipped" in figures:
        return f"{NAME}: skipped ({figures['skipped']})"
    title = (
        f"{NAME}: {figures['runs']} runs of {figures['scenario']} per leg; median (range) "
        f"of {figures['repeats']} interleaved repeat(s)"
    )
    rows = [
        f"  {label:<46} {_fmt(figures[key]):>9}  ({_fmt(figures[f'{key}_range'][0])}"
        f"–{_fmt(figures[f'{key}_range'][1])})"
        for key, label in ROWS
    ]
    note = textwrap.fill(figures["not_on_cluster"], 96, initial_indent="  ", subsequent_indent="  ")
    return "\n".join([title, *rows, note])


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3f}"
