"""The consumer-group loop every worker uses: read, run, ack, reclaim, dead-letter, stop.

A worker is a handler plus this loop (STYLE §1).  The lifecycle copies Temporal's activity
worker: `StreamWorker.run` serves until `notify_shutdown`; `shutdown` then lets in-flight
work finish for ``shutdown_grace_s`` and cancels the rest *without acking it*, so another
consumer reclaims it; calling `shutdown` twice is safe.  `run_burst` drains and returns, for
tests and one-shot jobs.

Delivery guarantees (README: Architecture):

* a message is XACKed only after its handler returned, i.e. after its effects are durable;
  handlers are idempotent, so any redelivery is harmless;
* a consumer that dies leaves its messages pending; a live one XAUTOCLAIMs them once idle
  for ``claim_idle_ms``.  A live consumer heartbeats its in-flight messages every
  ``heartbeat_ms`` (XCLAIM JUSTID: idle reset, delivery count unchanged), so
  ``claim_idle_ms`` can be short while handlers run long;
* a message that does not decode, or whose handler raises a non-retryable `CallgateError`,
  is dead-lettered at once; one that keeps failing (or keeps killing its consumer) is
  dead-lettered after ``max_deliveries``.  Dead-lettering is XACK + XADD in one Lua step.

Dead-letter entries (stream ``keys.dead_letter_for(stream)``) have the fields ``stream``,
``group``, ``message_id``, ``reason``, ``delivery_count`` and ``d`` (the raw message).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.connect import RedisClient
from callgate.ledger.wire import BlockingReads, wire_address
from callgate.logs import log_fields
from callgate.streams.commands import (
    REDIS_ERRORS,
    Acker,
    Scripts,
    backoff_s,
    delivery_counts,
    ensure_groups,
    nothing_pending,
    text,
)
from callgate.streams.delivery import (
    Accepts,
    DeadLetter,
    Delivery,
    Handler,
    Message,
    MessageRunner,
    WorkerStats,
)
from callgate.streams.slot_reads import SlotReads
from callgate.streams.upkeep import Upkeep

__all__ = ["DeadLetter", "Delivery", "Handler", "StreamWorker", "WorkerStats"]

log = logging.getLogger("callgate.streams")

RECLAIM_CHECKS = 6
"""Idle-message checks per ``claim_idle_ms``: a dead consumer's messages are taken over at
most ``claim_idle_ms / 6`` after they became claimable (XAUTOCLAIM is cheap)."""
HANDOFF_TURNS = 3
"""Event-loop turns a read yields to the messages it started before the next read is
written: enough for a handler with no read of its own to queue its step (one turn), for a
shielded step to start (one more) and for the pipeline to write it (one more)."""


class StreamWorker:
    """One consumer in ``group`` over ``streams``, handling what each carries (``accepts``)."""

    def __init__(
        self,
        redis: RedisClient,
        settings: Settings,
        *,
        group: str,
        streams: Sequence[str],
        handler: Handler,
        consumer: str | None = None,
        on_dead_letter: Callable[[DeadLetter], Awaitable[None]] | None = None,
        accepts: Accepts | None = None,
    ) -> None:
        if not streams:
            raise ValueError("a StreamWorker needs at least one stream")
        self._redis = redis
        self._settings = settings
        self._group = group
        self._streams = list(streams)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._scripts = Scripts(redis)
        self.stats = WorkerStats()
        self._runner = MessageRunner(
            settings,
            self._scripts,
            group=group,
            handler=handler,
            on_dead_letter=on_dead_letter,
            stats=self.stats,
            accepts=accepts,
        )
        self._upkeep = self._new_upkeep()
        self._free_slots = settings.concurrency
        """Messages this worker may still start: one slot per message being handled."""
        self._slot_freed = asyncio.Event()
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._force = asyncio.Event()
        self._serving: asyncio.Future[None] | None = None
        self._acker: Acker | None = None
        address = wire_address(redis) if settings.wire == "hiredis" else None
        self._blocking = None if address is None else BlockingReads(address)
        self._reads = SlotReads(redis, group, self.consumer)
        self._cursors: dict[str, str] = {}
        self._next_reclaim = 0.0
        self._rotate = 0

    def _new_upkeep(self) -> Upkeep:
        """The consumer's background upkeep: heartbeats for the messages it holds (`_held`),
        so they are not reclaimed while they run, and the trimming of its streams."""
        return Upkeep(
            self._redis,
            self._settings,
            self._scripts,
            group=self._group,
            consumer=self.consumer,
            streams=self._streams,
            held=self._held,
        )

    # Lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until shutdown is requested, then drain (see `shutdown`)."""
        await self._run(burst=False)

    async def run_burst(self) -> int:
        """Serve until nothing new arrives and nothing is pending in the group; return how many
        messages were settled (handled and acked, or dead-lettered) meanwhile."""
        before = self.stats.handled + self.stats.dead_lettered
        await self._run(burst=True)
        return self.stats.handled + self.stats.dead_lettered - before

    def notify_shutdown(self, *, force: bool = False) -> None:
        """Stop reading; in-flight work continues (``force``: cancel it without waiting)."""
        if not self._stopping.is_set():
            log.info("shutdown requested", extra=log_fields(consumer=self.consumer))
        self._stopping.set()
        if force:
            self._force.set()

    @property
    def shutdown_requested(self) -> bool:
        return self._stopping.is_set()

    async def shutdown(self) -> None:
        """Request shutdown and wait until in-flight work finished or was cancelled unacked."""
        self.notify_shutdown()
        if self._serving is not None:
            await asyncio.shield(self._serving)

    async def _run(self, *, burst: bool) -> None:
        if self._serving is not None:
            raise RuntimeError("this StreamWorker is already running")
        self._serving = asyncio.get_running_loop().create_future()
        acker = self._acker = Acker(self._redis, self._group)
        background = [
            asyncio.create_task(acker.run(), name="callgate-acks"),
            asyncio.create_task(self._upkeep.heartbeat(), name="callgate-heartbeat"),
            asyncio.create_task(self._upkeep.trim(), name="callgate-trim"),
        ]
        try:
            await self._ensure_groups()
            await self._loop(burst=burst)
        finally:
            try:
                await self._drain(acker, background)
            finally:
                self.stats.ack_round_trips += acker.flushes
                if self._blocking is not None:
                    self._blocking.close()
                await self._reads.close()
                self._serving.set_result(None)
                self._serving = None

    async def _drain(self, acker: Acker, background: list[asyncio.Task[None]]) -> None:
        """Wait out the grace, cancel what is left (unacked), flush acks, stop background."""
        grace_s = self._settings.shutdown_grace_s
        await self._wait_in_flight(grace_s)
        left = list(self._tasks.values())
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        if left:
            log.warning(
                "cancelled in-flight messages after the grace; left pending for reclaim",
                extra=log_fields(count=len(left), consumer=self.consumer),
            )
        acker.close()
        done, _ = await asyncio.wait([background[0]], timeout=max(1.0, grace_s))
        if not done:
            acker.abandon()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)

    async def _wait_in_flight(self, grace_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._tasks and not self._force.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            forced = asyncio.create_task(self._force.wait())
            await asyncio.wait(
                [*self._tasks.values(), forced],
                timeout=remaining,
                return_when=asyncio.FIRST_COMPLETED,
            )
            forced.cancel()

    # The loop ----------------------------------------------------------------------------

    async def _ensure_groups(self) -> None:
        attempt = 0
        while True:
            try:
                await ensure_groups(self._redis, self._group, self._streams)
                return
            except REDIS_ERRORS as exc:
                log.warning("cannot create consumer groups", extra=log_fields(error=repr(exc)))
                if await self._pause(backoff_s(attempt)):
                    return
                attempt += 1

    async def _loop(self, *, burst: bool) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                if await self._step(burst=burst):
                    return
                attempt = 0
                continue
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    # Redis lost the group (restart without persistence, stream deleted).
                    log.warning(
                        "consumer group missing; recreating", extra=log_fields(error=str(exc))
                    )
                    await self._ensure_groups()
                    continue
                log.exception("unexpected redis error in the stream loop")
            except REDIS_ERRORS as exc:
                log.warning(
                    "redis unavailable; backing off",
                    extra=log_fields(error=repr(exc), attempt=attempt),
                )
            await self._pause(backoff_s(attempt))
            attempt += 1

    async def _pause(self, delay_s: float) -> bool:
        """Sleep ``delay_s`` unless shutdown is requested first; True if it was."""
        try:
            await asyncio.wait_for(self._stopping.wait(), delay_s)
        except TimeoutError:
            return False
        return True

    async def _step(self, *, burst: bool) -> bool:
        """Claim and read at most as many messages as there are free slots.

        Returns True when ``burst`` and the group is drained."""
        slots = await self._take_slots(self._settings.read_count)
        if slots == 0:
            return False
        started = 0
        try:
            was_idle = not self._tasks
            loop = asyncio.get_running_loop()
            if loop.time() >= self._next_reclaim:
                every_s = self._settings.claim_idle_ms / 1000 / RECLAIM_CHECKS
                self._next_reclaim = loop.time() + every_s
                started += await self._reclaim(slots)
                if started == slots:
                    self._next_reclaim = 0.0  # a full page: a dead consumer left more
            if slots > started:
                started += await self._read(slots - started)
        finally:
            self._free_slots += slots - started
        if burst and was_idle and started == 0 and not self._tasks:
            # Nothing ran since before the read, so nothing can have enqueued meanwhile.
            return await nothing_pending(self._redis, self._group, self._streams)
        return False

    async def _take_slots(self, want: int) -> int:
        """Take up to ``want`` free slots, waiting at most one read block for the first."""
        if self._free_slots <= 0:  # below 0 while a cluster's late read runs over (SlotReads)
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), self._settings.read_block_ms / 1000)
            except TimeoutError:
                return 0
        taken = max(0, min(want, self._free_slots))  # none while still over
        self._free_slots -= taken
        return taken

    async def _read(self, budget: int) -> int:
        # COUNT applies per stream, so read only as many streams as the budget covers.
        n = len(self._streams)
        if budget >= n:
            chosen, per_stream = self._streams, budget // n
        else:
            start = self._rotate % n
            chosen, per_stream = (self._streams[start:] + self._streams[:start])[:budget], 1
            self._rotate = start + budget
        block_ms = self._settings.read_block_ms
        if self._blocking is not None:
            reply = await self._blocking.xreadgroup(
                self._group, self.consumer, chosen, per_stream, block_ms
            )
        else:
            reply = await self._reads.read(chosen, per_stream, block_ms)
        started = 0
        for name, entries in reply.items() if isinstance(reply, dict) else reply or []:
            for message_id, fields in entries:
                self._start(Message.of(text(name), text(message_id), fields, 1))
                started += 1
        if started:
            # The next read is on no message's path; the steps of these are.  Let them run
            # to their first write and that write go out (a few loop turns) before it.
            for _ in range(HANDOFF_TURNS):
                await asyncio.sleep(0)
        return started

    async def _reclaim(self, budget: int) -> int:
        """XAUTOCLAIM idle pending messages (a dead consumer's, or our own failed ones)."""
        started = 0
        # Ours when the claim went out: it may finish and be acked before the reply is read,
        # and must not run again then (a failed one is claimed on a later pass).
        running = set(self._tasks)
        for stream in self._streams:
            if started >= budget:
                break
            reply = await self._redis.xautoclaim(
                stream,
                self._group,
                self.consumer,
                self._settings.claim_idle_ms,
                start_id=self._cursors.get(stream, "0-0"),
                count=budget - started,
            )
            self._cursors[stream] = text(reply[0])
            for deleted in reply[2] if len(reply) > 2 else []:
                await self._runner.dead(
                    Message(stream, text(deleted), b"", 0),
                    None,
                    "entry deleted from the stream before it was settled",
                    gone=True,
                )
            entries = [(text(i), f) for i, f in reply[1] if i is not None and f is not None]
            counts = await delivery_counts(
                self._redis, stream, self._group, self.consumer, [i for i, _ in entries]
            )
            for message_id, fields in entries:
                if (stream, message_id) in running:
                    continue  # running here when claimed; the claim only refreshed it
                msg = Message.of(stream, message_id, fields, counts.get(message_id, 1))
                self.stats.reclaimed += 1
                log.info("reclaimed idle message", extra=msg.fields(delivery_count=msg.count))
                self._start(msg)
                started += 1
        return started

    def _held(self) -> list[tuple[str, str]]:
        """Messages being handled here (the heartbeat's), not those already being acked."""
        settling = self._runner.settling
        return [key for key in self._tasks if key not in settling]

    def _start(self, msg: Message) -> None:
        """Run one message in a task that owns one slot (released however the task ends)."""
        key = (msg.stream, msg.message_id)
        assert self._acker is not None, "messages run only while serving"
        task = asyncio.create_task(self._runner.process(msg, self._acker))
        self._tasks[key] = task

        def _done(_: asyncio.Task[None]) -> None:
            self._tasks.pop(key, None)
            self._free_slots += 1
            self._slot_freed.set()

        task.add_done_callback(_done)
