"""Following every run's event log from a cursor kept in Redis: the webhooks worker's reads and
its bookkeeping (`callgate.webhooks.follow` decides what the events mean).

No step of the loop changes for this: the follower only reads what the ledger already writes
(the runs index, the inbox indexes, each run's event log) and keeps its own keys beside them
(`Keys.webhooks`, `Keys.webhook_cursor`), each partition's in that partition's slot:

* ``watch`` — the runs being followed.  A run joins when it appears in the runs index (read
  from ``since``, its creation-time cursor) or in an inbox index (a run resumed after it ended
  and now waits for a person again); it leaves once its log showed an end and nothing newer.
* a cursor per run — ``<last entry id read> <run status seen>``, expiring with the run's keys;
* ``counts`` — the event counters; per run, the request times of its undecided approvals.

A pass costs one XREAD over at most ``batch`` event logs per partition (a rotating window over
``watch``), never a SCAN; everything it learnt is written in one MULTI per partition, so a
counter moves once per event however often a pass is cut short and repeated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from callgate.connect import RedisClient, slot_client
from callgate.keys import Keys
from callgate.records import Event, entry_events
from callgate.streams.commands import text as _text

INBOX_MAX = 1000
"""Inbox entries looked at per pass and partition for runs that came back."""
LOOKBACK_MS = 2000
"""How far behind its cursor a pass reads the runs index again (`Follower.discover`)."""
PAGES_MAX = 20
"""Pages of new runs one pass reads per partition (the rest wait for the next pass)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far a run's log was read, and the run status the log last showed."""

    entry_id: str = "0-0"
    status: str = ""

    @classmethod
    def parse(cls, raw: bytes | str | None) -> Cursor:
        if raw is None:
            return cls()
        entry_id, _, status = _text(raw).partition(" ")
        return cls(entry_id, status)

    def __str__(self) -> str:
        return f"{self.entry_id} {self.status}"


@dataclass
class Progress:
    """What one pass over a partition learnt, written at once by `commit`."""

    cursors: dict[str, Cursor] = field(default_factory=dict)
    unwatch: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    asked: dict[tuple[str, str], int | None] = field(default_factory=dict)
    """(run id, approval id) → when requested; None: decided, forget it."""


class Follower:
    """The reads and writes of following partitions' event logs."""

    def __init__(self, redis: RedisClient, keys: Keys, retention_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.retention_s = retention_s

    async def lease(self, owner: str, ms: int) -> bool:
        """One follower pass at a time across every webhooks worker: True if ``owner`` holds
        the lease now (it lapses after ``ms``, so a dead holder blocks nobody for long)."""
        key = self.keys.webhooks(0, "lease")
        if await self.redis.set(key, owner, nx=True, px=ms):
            return True
        return _text(await self.redis.get(key) or b"") == owner

    async def release(self, owner: str) -> None:
        key = self.keys.webhooks(0, "lease")
        if _text(await self.redis.get(key) or b"") == owner:
            await self.redis.delete(key)

    async def discover(self, partition: int, batch: int) -> None:
        """Watch the runs created since the last pass, and the runs people must act on.

        A run's index entry is scored by its creation time, taken before the step that adds it
        commits, so an entry may land a little behind ``since``: each pass looks `LOOKBACK_MS`
        back (ZADD NX: a run already watched keeps its place)."""
        k = self.keys
        since = int(await self.redis.get(k.webhooks(partition, "since")) or 0)
        new: list[tuple[bytes, float]] = []
        for page in range(PAGES_MAX):
            rows = await self.redis.zrangebyscore(
                k.runs_index(partition),
                max(0, since - LOOKBACK_MS),
                "+inf",
                start=page * batch,
                num=batch,
                withscores=True,
            )
            new += rows
            if len(rows) < batch:
                break
        pipe = self.redis.pipeline(transaction=False)
        if new:
            pipe.zadd(
                k.webhooks(partition, "watch"),
                {_text(run_id): score for run_id, score in new},
                nx=True,
            )
            pipe.set(k.webhooks(partition, "since"), max(since, int(new[-1][1])))
        for index in (k.pending_approvals(partition), k.unresolved_calls(partition)):
            members = await self.redis.zrange(index, 0, INBOX_MAX - 1)
            runs = {_text(m).partition(" ")[0] for m in members}
            if runs:
                pipe.zadd(k.webhooks(partition, "watch"), dict.fromkeys(runs, 0), nx=True)
        await pipe.execute()

    async def watched(self, partition: int, offset: int, count: int) -> list[tuple[str, int]]:
        """A window of the watched runs: ``(run id, created_ms)`` (0: came from an inbox)."""
        rows = await self.redis.zrange(
            self.keys.webhooks(partition, "watch"), offset, offset + count - 1, withscores=True
        )
        return [(_text(run_id), int(score)) for run_id, score in rows]

    async def cursors(self, run_ids: Sequence[str]) -> dict[str, Cursor]:
        if not run_ids:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.get(self.keys.webhook_cursor(run_id))
        raw = await pipe.execute()
        return {run_id: Cursor.parse(value) for run_id, value in zip(run_ids, raw, strict=True)}

    async def read(self, cursors: Mapping[str, Cursor], per_run: int) -> dict[str, list[Event]]:
        """The new entries of each run's log after its cursor, oldest first."""
        if not cursors:
            return {}
        streams: dict[Any, Any] = {self.keys.events(r): c.entry_id for r, c in cursors.items()}
        reply = await self.redis.xread(streams, count=per_run)
        by_stream = {_text(name): entries for name, entries in reply or []}
        return {
            run_id: [e for i, f in by_stream[self.keys.events(run_id)] for e in entry_events(i, f)]
            for run_id in cursors
            if self.keys.events(run_id) in by_stream
        }

    async def call_tools(self, calls: Sequence[tuple[str, str]]) -> dict[str, str]:
        """The tool of each ``(run id, call id)`` whose ``call.created`` an earlier pass read."""
        pipe = self.redis.pipeline(transaction=False)
        for run_id, call_id in calls:
            pipe.hget(self.keys.call(run_id, call_id), "tool")
        tools = await pipe.execute() if calls else []
        return {
            call_id: _text(tool)
            for (_, call_id), tool in zip(calls, tools, strict=True)
            if tool is not None
        }

    async def asked(self, approvals: Sequence[tuple[str, str]]) -> dict[str, int]:
        """When each ``(run id, approval id)`` was requested, as an earlier pass recorded it."""
        pipe = self.redis.pipeline(transaction=False)
        for run_id, approval_id in approvals:
            pipe.hget(self.keys.webhook_asked(run_id), approval_id)
        raw = await pipe.execute() if approvals else []
        return {a: int(v) for (_, a), v in zip(approvals, raw, strict=True) if v is not None}

    async def commit(self, partition: int, progress: Progress) -> None:
        """Cursors, counters, request times and who leaves the watch, in one MULTI."""
        k = self.keys
        pipe = (await slot_client(self.redis, k.tag(partition))).pipeline(transaction=True)
        for run_id, cursor in progress.cursors.items():
            pipe.set(k.webhook_cursor(run_id), str(cursor), ex=self.retention_s)
        for name, amount in progress.counts.items():
            pipe.hincrby(k.webhooks(partition, "counts"), name, amount)
        for (run_id, approval_id), t_ms in progress.asked.items():
            if t_ms is None:
                pipe.hdel(k.webhook_asked(run_id), approval_id)
            else:
                pipe.hset(k.webhook_asked(run_id), approval_id, str(t_ms))
                pipe.expire(k.webhook_asked(run_id), self.retention_s)
        if progress.unwatch:
            pipe.zrem(k.webhooks(partition, "watch"), *progress.unwatch)
        await pipe.execute()
