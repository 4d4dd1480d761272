"""What `/metrics` reads from Redis at scrape time: bounded, SCAN-free, every worker's at once.

Nothing is kept in a process's memory, so every replica of every worker kind is counted by
reading the one store they share (no multiprocess directory to mount):

* runs by status — the status of the newest ``runs_max`` runs, an equal share from each
  partition's runs index (one ZREVRANGE and one pipelined HGET each: ``runs_sampled`` says how
  many were read);
* the event counters the webhooks worker keeps while it follows every run's event log (calls
  by tool and outcome, runs finished, reconciliations, approval waits: `callgate.webhooks.events`);
* webhook deliveries by endpoint and outcome;
* per hot-path and notify stream and consumer group: pending entries and lag (XINFO GROUPS);
* dead letters per partition (XLEN).

A scrape costs a fixed number of round trips (about four, pipelined) whatever the load.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from callgate.connect import RedisClient
from callgate.keys import STREAM_KINDS, Keys
from callgate.streams.commands import text

WATCHED_STREAMS = (*STREAM_KINDS, "notify")
RUNS_MAX = 10_000
"""Runs whose status a scrape reads (the newest of each partition, in equal shares)."""


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One consumer group on one stream."""

    stream: str
    partition: int
    group: str
    pending: int
    lag: int | None
    """Entries not yet delivered to the group (None when Redis cannot tell)."""


@dataclass
class Snapshot:
    runs: Counter[str] = field(default_factory=Counter)
    runs_sampled: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    deliveries: Counter[str] = field(default_factory=Counter)
    groups: list[GroupRow] = field(default_factory=list)
    dead_letters: dict[int, int] = field(default_factory=dict)


async def snapshot(redis: RedisClient, keys: Keys, runs_max: int = RUNS_MAX) -> Snapshot:
    """Everything one scrape exports, read now."""
    snap = Snapshot()
    parts = range(keys.partitions)
    share = max(1, runs_max // keys.partitions)
    pipe = redis.pipeline(transaction=False)
    for p in parts:
        pipe.zrevrange(keys.runs_index(p), 0, share - 1)
        pipe.hgetall(keys.webhooks(p, "counts"))
        pipe.xlen(keys.dead_letter(p))
    pipe.hgetall(keys.webhook_stats())
    replies = await pipe.execute()
    run_ids: list[str] = []
    for p in parts:
        ids, counts, dead = replies[3 * p : 3 * p + 3]
        run_ids += [text(r) for r in ids]
        snap.counts.update({text(k): int(v) for k, v in counts.items()})
        snap.dead_letters[p] = int(dead)
    snap.deliveries.update({text(k): int(v) for k, v in replies[-1].items()})
    snap.runs_sampled = len(run_ids)
    snap.runs = await _statuses(redis, keys, run_ids)
    snap.groups = await _groups(redis, keys)
    return snap


async def _statuses(redis: RedisClient, keys: Keys, run_ids: list[str]) -> Counter[str]:
    if not run_ids:
        return Counter()
    pipe = redis.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hget(keys.run(run_id), "status")
    return Counter(text(s) for s in await pipe.execute() if s is not None)


async def _groups(redis: RedisClient, keys: Keys) -> list[GroupRow]:
    where = [(kind, p) for kind in WATCHED_STREAMS for p in range(keys.partitions)]
    pipe = redis.pipeline(transaction=False)
    for kind, p in where:
        pipe.xinfo_groups(keys.stream(kind, p))
    replies = await pipe.execute(raise_on_error=False)
    rows = []
    for (kind, p), groups in zip(where, replies, strict=True):
        if isinstance(groups, Exception):
            continue  # no such stream yet: nothing pending, nobody lagging
        for info in groups:
            row = {text(k): v for k, v in info.items()}
            lag = row.get("lag")
            rows.append(
                GroupRow(
                    kind,
                    p,
                    text(row["name"]),
                    int(row["pending"]),
                    None if lag is None else int(lag),
                )
            )
    return rows
