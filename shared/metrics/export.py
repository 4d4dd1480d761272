"""`/metrics`: a `Snapshot` as Prometheus families, and the ASGI endpoint that serves them.

`families` is pure (a snapshot in, metric families out), so what each metric means is tested
without Redis; `MetricsApp` is a plain ASGI app — mount it in the HTTP API
(``Route("/metrics", MetricsApp(settings))`` or ``Mount``), or serve it alone with uvicorn.
`METRICS` names every family, for the Grafana dashboard's check (deploy/grafana/).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from starlette.routing import Route

from callgate.config import Settings
from callgate.connect import RedisClient, redis_client
from callgate.keys import Keys
from callgate.metrics.gather import RUNS_MAX, Snapshot, snapshot
from callgate.webhooks.events import WAIT_BUCKETS_S

METRICS = {
    "callgate_runs": "gauge",
    "callgate_runs_sampled": "gauge",
    "callgate_runs_finished": "counter",
    "callgate_calls": "counter",
    "callgate_reconciliations": "counter",
    "callgate_approval_wait_seconds": "histogram",
    "callgate_stream_pending": "gauge",
    "callgate_stream_lag": "gauge",
    "callgate_dead_letters": "gauge",
    "callgate_webhook_deliveries": "counter",
}
"""Every family exported, by name and type (counters gain ``_total`` on the wire)."""


def _split(counts: Iterable[tuple[str, int]], head: str) -> Iterator[tuple[list[str], int]]:
    for name, value in counts:
        parts = name.split("|")
        if parts[0] == head:
            yield parts[1:], value


def families(snap: Snapshot) -> list[Metric]:
    """Every metric family of ``snap``."""
    runs = GaugeMetricFamily(
        "callgate_runs",
        "Runs by status, among the newest runs read (callgate_runs_sampled)",
        labels=["status"],
    )
    for status, n in sorted(snap.runs.items()):
        runs.add_metric([status], n)
    sampled = GaugeMetricFamily(
        "callgate_runs_sampled", "Runs whose status this scrape read", value=snap.runs_sampled
    )
    counts = sorted(snap.counts.items())
    finished = CounterMetricFamily(
        "callgate_runs_finished", "Runs that ended, by status", labels=["status"]
    )
    calls = CounterMetricFamily(
        "callgate_calls", "Tool calls by tool and outcome", labels=["tool", "outcome"]
    )
    reconciled = CounterMetricFamily(
        "callgate_reconciliations",
        "Unknown write outcomes settled, by who and how",
        labels=["by", "outcome"],
    )
    for family, head in ((finished, "finished"), (calls, "calls"), (reconciled, "reconciled")):
        for labels, n in _split(counts, head):
            family.add_metric(labels, n)
    deliveries = CounterMetricFamily(
        "callgate_webhook_deliveries",
        "Webhook delivery attempts by endpoint and outcome",
        labels=["endpoint", "outcome"],
    )
    for name, n in sorted(snap.deliveries.items()):
        deliveries.add_metric(name.split("|", 1), n)
    return [runs, sampled, finished, calls, reconciled, _waits(counts), *_streams(snap), deliveries]


def _waits(counts: list[tuple[str, int]]) -> HistogramMetricFamily:
    wait = HistogramMetricFamily(
        "callgate_approval_wait_seconds",
        "Time from an approval's request to its decision",
        labels=["decision"],
    )
    by_decision: dict[str, dict[str, int]] = {}
    for (decision, bucket), n in _split(counts, "wait"):
        by_decision.setdefault(decision, {})[bucket] = n
    for decision, row in sorted(by_decision.items()):
        # ``le`` as Prometheus writes it (60 → "60.0"); the counts are keyed as written.
        buckets = [(repr(float(le)), row.get(f"{le:g}", 0)) for le in WAIT_BUCKETS_S]
        buckets.append(("+Inf", row.get("+Inf", 0)))
        wait.add_metric([decision], buckets, sum_value=row.get("sum_ms", 0) / 1000)
    return wait


def _streams(snap: Snapshot) -> list[Metric]:
    labels = ["stream", "partition", "group"]
    pending = GaugeMetricFamily(
        "callgate_stream_pending",
        "Entries delivered to a consumer group and not yet acknowledged",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "callgate_stream_lag", "Entries not yet delivered to a consumer group", labels=labels
    )
    for row in snap.groups:
        where = [row.stream, str(row.partition), row.group]
        pending.add_metric(where, row.pending)
        if row.lag is not None:
            lag.add_metric(where, row.lag)
    dead = GaugeMetricFamily(
        "callgate_dead_letters", "Entries in the dead-letter stream", labels=["partition"]
    )
    for partition, n in sorted(snap.dead_letters.items()):
        dead.add_metric([str(partition)], n)
    return [pending, lag, dead]


class _Once(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def render(snap: Snapshot) -> bytes:
    """The Prometheus text exposition of ``snap``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once(families(snap)))
    return generate_latest(registry)


class MetricsApp:
    """ASGI app answering any GET with the metrics read from Redis now."""

    def __init__(self, settings: Settings, runs_max: int = RUNS_MAX) -> None:
        self.settings = settings
        self.keys = Keys(settings.key_prefix, settings.partitions)
        self.runs_max = runs_max
        self._redis: RedisClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope.get("method", "GET") not in ("GET", "HEAD"):
            await _reply(send, 405, b"GET only\n", "text/plain")
            return
        if self._redis is None:
            self._redis = redis_client(self.settings.redis_url)
        body = render(await snapshot(self._redis, self.keys, self.runs_max))
        await _reply(send, 200, body, CONTENT_TYPE_LATEST)

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None


async def _reply(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def metrics_route(endpoint: MetricsApp) -> Route:
    """``Route("/metrics", endpoint)`` for the HTTP API's Starlette app (the endpoint holds a
    Redis client: ``await endpoint.aclose()`` on shutdown)."""
    return Route("/metrics", endpoint, methods=["GET", "HEAD"])
