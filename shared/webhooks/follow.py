"""One follow pass: read every watched run's new events, hand each webhook event to the delivery
queue once per endpoint, and count what happened (`callgate.metrics` reads the counts).

A pass runs as the webhooks worker's periodic arq job (every second), under a lease, so one
pass at a time runs across replicas.  Its order makes it safe to cut short anywhere: deliveries
are enqueued under a job id per event and endpoint (`delivery_id`; arq keeps one job per id,
and the job itself skips a delivery already made), and only then are the cursors and counters
written, together (`callgate.streams.follow.Follower.commit`).  A pass repeated after a crash
re-enqueues what arq already holds — a no-op — and counts nothing twice.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from callgate.clock import now_ms
from callgate.records import Event, entry_of
from callgate.states import RUN_TERMINAL
from callgate.streams.follow import Cursor, Follower, Progress
from callgate.webhooks.events import DECIDED, Tally, WebhookEvent, webhook_event
from callgate.webhooks.settings import Endpoint

PER_RUN = 200
"""Events read per run and pass (a run with more continues next pass)."""
ENDED_GRACE_MS = 60_000
"""How long an ended run stays watched after its last event: a write in flight when it was
cancelled is still reconciled, and counted."""
LEASE_MS = 30_000
WINDOWS_MAX = 10
"""Windows of ``batch`` watched runs one pass reads per partition."""

Enqueue = Callable[[Endpoint, WebhookEvent], Awaitable[bool]]
"""Hand one event to the delivery queue for one endpoint; False if it was there already."""


def delivery_id(endpoint: Endpoint, event: WebhookEvent) -> str:
    """The one id of an event's delivery to one endpoint: arq's job id, the dedup key.

    Keyed with the endpoint's secret: submitters may create ``arq:job:*`` keys (that is how
    they enqueue a run), and one that could guess this id could squat it and so silence the
    delivery (arq enqueues nothing under a job id that exists)."""
    digest = hmac.new(endpoint.key(), event.id.encode(), hashlib.sha256).hexdigest()[:32]
    return f"webhook:{endpoint.name}:{digest}"


@dataclass
class Feed:
    """The follow passes of one webhooks worker process (its window offsets live here)."""

    follower: Follower
    partitions: int
    retention_s: int
    endpoints: Sequence[Endpoint]
    enqueue: Enqueue
    batch: int = 500
    owner: str = "webhooks"
    max_age_s: float = 86_400.0
    """Events older than this when read are counted but not delivered (a first start on a
    deployment with history, or a worker down for days, does not flood the receivers)."""
    offsets: dict[int, int] = field(default_factory=dict)
    _passing: bool = field(default=False, init=False)

    async def run_pass(self) -> int:
        """One pass over every partition; how many deliveries it enqueued (0 if a pass runs
        already, here or in another process: two would count the same events twice)."""
        if self._passing:
            return 0
        self._passing = True  # before the first await: a second pass may start during it
        try:
            if not await self.follower.lease(self.owner, LEASE_MS):
                return 0
            try:
                return sum([await self.partition(p) for p in range(self.partitions)])
            finally:
                await self.follower.release(self.owner)
        finally:
            self._passing = False

    async def partition(self, partition: int) -> int:
        """Discover new runs, then read the watched ones a window of ``batch`` at a time, up
        to `WINDOWS_MAX` windows (a larger watch is read across passes)."""
        await self.follower.discover(partition, self.batch)
        sent = 0
        for _ in range(WINDOWS_MAX):
            offset = self.offsets.get(partition, 0)
            runs = await self.follower.watched(partition, offset, self.batch)
            wrapped = len(runs) < self.batch
            self.offsets[partition] = 0 if wrapped else offset + len(runs)
            sent += await self.window(partition, runs)
            if wrapped:
                break
        return sent

    async def window(self, partition: int, runs: list[tuple[str, int]]) -> int:
        """Read, hand over and count the new events of ``runs``; commit what was learnt."""
        follower = self.follower
        cursors = await follower.cursors([run_id for run_id, _ in runs])
        logs = await follower.read(cursors, PER_RUN)
        tools = await self._tools(logs)
        run_of = {
            str(e.data.get("approval_id")): run_id
            for run_id, events in logs.items()
            for e in events
            if e.type == "approval.requested" or e.type in DECIDED
        }
        asked = await follower.asked(
            [(run_id, approval_id) for approval_id, run_id in run_of.items()]
        )
        tally, progress, sent = Tally(), Progress(), 0
        now = now_ms()
        for run_id, created_ms in runs:
            events = logs.get(run_id, [])
            cursor = cursors[run_id]
            for event in events:
                tally.add(event, tools, asked)
                if now - event.t_ms <= self.max_age_s * 1000:
                    sent += await self._deliver(webhook_event(run_id, event, tools))
            if events:
                last = entry_of(events[-1].id)  # a read takes whole entries
                progress.cursors[run_id] = Cursor(last, _status(cursor.status, events))
            elif _done(cursor, created_ms, now, self.retention_s):
                progress.unwatch.append(run_id)
        progress.counts = tally.counts
        progress.asked = {(run_of[a], a): t for a, t in tally.asked.items() if a in run_of}
        await follower.commit(partition, progress)
        return sent

    async def _deliver(self, event: WebhookEvent | None) -> int:
        if event is None:
            return 0
        sent = 0
        for endpoint in self.endpoints:
            if event.type in endpoint.events:
                sent += await self.enqueue(endpoint, event)
        return sent

    async def _tools(self, logs: dict[str, list[Event]]) -> dict[str, str]:
        """Call id → tool for every call these events name: from their ``call.created`` when
        read now, else from the call record an earlier pass saw created."""
        tools = {
            str(e.data.get("call_id")): str(e.data.get("tool"))
            for events in logs.values()
            for e in events
            if e.type == "call.created"
        }
        missing = sorted(
            {
                (run_id, str(e.data.get("call_id")))
                for run_id, events in logs.items()
                for e in events
                if e.type == "call.transition" and str(e.data.get("call_id")) not in tools
            }
        )
        return {**tools, **await self.follower.call_tools(missing)}


def _status(status: str, events: list[Event]) -> str:
    """The run status the last run transition among ``events`` names (else ``status``)."""
    for event in events:
        if event.type == "run.transition" and isinstance(event.data.get("to"), str):
            status = event.data["to"]
    return status


def _done(cursor: Cursor, created_ms: int, now: int, retention_s: int) -> bool:
    """Whether a run with nothing new leaves the watch: it ended a while ago, or its keys
    (and its log) have expired."""
    last_ms = int(cursor.entry_id.split("-", 1)[0] or 0)
    if cursor.status in RUN_TERMINAL and now - last_ms > ENDED_GRACE_MS:
        return True
    return max(created_ms, last_ms) < now - retention_s * 1000
