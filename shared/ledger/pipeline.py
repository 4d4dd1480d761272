"""`AutoPipeline`: the Redis commands issued while the event loop is busy go as one pipeline.

A worker runs many messages at once, and each handler awaits a few small commands (read the
run, apply one Lua step).  Sent one by one, every command costs a syscall and a wake-up on
both sides, and most of a worker's CPU goes there.  Here a request (one or several commands)
is queued and its caller gets a future; the queue is flushed by a callback scheduled on the
event loop, so every request made by the tasks that run before it rides in the same pipeline:
one write, one round trip.  There is no linger timer, so a lone request waits for nothing.

Only the ledger's own commands come through here (`WIRE_COMMANDS`: reading records and
history, the Lua step); any other is a programming error, refused at once.  They go over a
connection of their own, written and parsed with hiredis directly (`callgate.ledger.wire`):
the redis-py pipeline machinery around each command costs more CPU than Redis spends
answering it.  With ``CALLGATE_WIRE=redis-py``, or a client that is not plain TCP to one
fixed address (TLS, a Unix socket, a master found through Sentinel, a cluster), every flush
takes redis-py's pipeline instead (on a cluster, one per slot's master); replies are the same
either way, and a worker's ``serving`` line names the transport.

What does not change: each command is still a separate command (no MULTI around a batch),
except that the flush's ledger steps go as one script call per slot (group commit,
`callgate.ledger.group`), where each step stays atomic on its own and independent of its
neighbours; and each caller gets its own replies or its own error — a Lua error or NOSCRIPT
hits only its command (or step); a lost connection fails every request of that flush, exactly
as it would have failed each of them.
Commands of one caller keep their order.  Blocking commands (XREADGROUP BLOCK, XREAD BLOCK)
must not go through here.

A *confirming* pipeline (``confirm=(replicas, timeout_ms)``, `callgate.ledger.durable`) ends
every flush with ``WAIT replicas timeout_ms`` on the same connection, which is what WAIT counts
the writes of: each caller gets its replies once that WAIT answered, with how many replicas
hold them appended.  Its flushes wait on replicas, so it gets a connection of its own and only
the steps that must be confirmed ride it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Literal, TypeVar

from callgate.connect import ClusterClient, RedisClient, served_elsewhere
from callgate.keys import slot_of
from callgate.ledger.group import merge_steps
from callgate.ledger.wire import WIRE_COMMANDS, Replies, Wire, WireAddress, wire_address

log = logging.getLogger("callgate.ledger")
Transport = Literal["hiredis", "redis-py"]

Command = tuple[Any, ...]
"""``(pipeline method name, *args)``, e.g. ``("hgetall", key)``, or ``("apply", tx)``: a
ledger step, which goes with the flush's other steps in one script call (`merge_steps`)."""

Batch = list[tuple[Sequence[Command], Replies]]
REDIRECT_TRIES = 8
REDIRECT_PAUSE_S = 0.1
"""A request redirected on a cluster is sent again after 0.1 s, 0.2 s, … (about 3 s in all):
longer than a slot's keys take to move, or a replica to be promoted."""
Confirm = tuple[int, int]
"""``(replicas, timeout_ms)`` of the ``WAIT`` a confirming pipeline ends each flush with."""
T = TypeVar("T")


class AutoPipeline:
    """Coalesces the requests of one event loop iteration into one pipelined round trip."""

    def __init__(
        self,
        redis: RedisClient,
        transport: Transport = "hiredis",
        *,
        group: bool = True,
        confirm: Confirm | None = None,
    ) -> None:
        self._redis = redis
        self._group = group
        self._confirm = confirm
        self._address: WireAddress | None = None
        if transport == "hiredis":
            self._address = wire_address(redis)
            if self._address is None:  # and a worker's "serving" line names the transport
                log.debug(
                    "ledger commands use redis-py: the connection is TLS, a Unix socket, "
                    "a master found through Sentinel or a cluster"
                )
        self.transport: Transport = "hiredis" if self._address is not None else "redis-py"
        self._wire: Wire | None = None
        self._connecting: asyncio.Task[Wire] | None = None
        self._queue: Batch = []
        self._scheduled = False
        self._flushing: set[asyncio.Task[None]] = set()
        self.flushes = 0
        """Round trips so far (for tests and metrics)."""

    def send(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """Queue ``commands``; the future gets their replies, a Redis error in place of the
        reply of a command that failed, or the exception that failed the whole flush.

        `ValueError` for a command that is not one of the ledger's (`WIRE_COMMANDS`)."""
        steps = 0
        for command in commands:
            if command[0] == "apply":
                steps += 1
            elif command[0] not in WIRE_COMMANDS or command[0] == "wait":
                raise ValueError(f"{command[0]!r} is not a ledger command; use the client")
        if steps and steps != len(commands):
            raise ValueError("a request is either ledger steps or other commands, not both")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._queue.append((commands, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    async def aclose(self) -> None:
        """Close the hot-command connection (redis-py's pool is its client's to close)."""
        if self._connecting is not None:
            self._connecting.cancel()
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def _flush(self) -> None:
        self._scheduled = False
        queued, self._queue = self._queue, []
        if not queued:
            return
        if isinstance(self._redis, ClusterClient):
            for slot, requests in _by_slot(queued).items():
                self._spawn(self._answered(requests, slot))
            return
        batch = self._merged(queued)
        if self._address is not None:
            wire = self._wire
            if wire is not None and wire.usable():
                self.flushes += 1
                wire.send(batch)
                return
            self._spawn(self._send_after_connecting(batch))
            return
        self._spawn(self._execute(batch))

    def _merged(self, queued: Batch) -> Batch:
        if self._confirm is None:
            return merge_steps(queued, group=self._group)
        return _then_wait(queued, self._confirm, self._group)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _send_after_connecting(self, batch: Batch) -> None:
        wire = await _or_fail(batch, self._connected())
        if wire is not None:
            self.flushes += 1
            wire.send(batch)

    async def _connected(self) -> Wire:
        """The hot-command connection, connecting it (once, for every flush waiting).

        A flush that found no connection may run after the connection opened: it uses
        that one, and never closes it with the other flushes' requests in flight."""
        assert self._address is not None
        if self._wire is not None and self._wire.usable():
            return self._wire
        if self._connecting is None or self._connecting.done():
            if self._wire is not None:
                self._wire.close()
                self._wire = None
            self._connecting = asyncio.create_task(self._connect(self._address))
        return await asyncio.shield(self._connecting)

    async def _connect(self, address: WireAddress) -> Wire:
        wire = await Wire.connect(address)
        self._wire = wire  # before any waiter resumes: a flush in between finds it
        return wire

    async def _answered(self, requests: Batch, slot: int) -> None:
        """`_execute` one slot's requests; a request it left unanswered, whatever stopped it,
        fails rather than leave its caller waiting for ever (and holding its message)."""
        try:
            await self._execute(self._merged(requests), slot)
        finally:
            if not all(future.done() for _, future in requests):
                log.error("a flush ended without answering every request; they fail")
                _fail(requests, ConnectionError("the flush ended without answering"))

    async def _execute(self, batch: Batch, slot: int | None = None) -> None:
        """Send ``batch`` and answer each request.  On a cluster, a request a node did not run
        because its slot is served elsewhere (moved, half-moved, its master failing over) is
        sent again once the slot map is relearnt, up to `REDIRECT_TRIES` times; a confirming
        pipeline's is not (its WAIT must follow its own writes), and gets the error."""
        for attempt in range(REDIRECT_TRIES):
            replies = await _or_fail(batch, self._pipelined(batch, slot))
            if replies is None:
                return
            self.flushes += 1
            again = slot is not None and self._confirm is None and attempt + 1 < REDIRECT_TRIES
            batch = _answer(batch, replies, keep_elsewhere=again)
            if not batch or await _or_fail(batch, self._relearn(attempt)) is None:
                return

    async def _relearn(self, attempt: int) -> bool:
        """Relearn the cluster's slot map (which fails while it has no master for a slot: the
        requests waiting to be sent again then fail with that error), then pause."""
        assert isinstance(self._redis, ClusterClient)
        await self._redis.nodes_manager.initialize()
        await asyncio.sleep(REDIRECT_PAUSE_S * (attempt + 1))
        return True

    async def _pipelined(self, batch: Batch, slot: int | None) -> list[Any]:
        """One pipeline of ``batch``; on a cluster, to the master of ``slot`` on one connection
        (a cluster client's pipeline takes no script call, and ``WAIT`` counts the writes of
        the connection it is sent on)."""
        client = self._redis
        if isinstance(client, ClusterClient):
            client = await client.master_of(slot or 0)
        async with client.pipeline(transaction=False) as pipe:
            for commands, _ in batch:
                for method, *args in commands:
                    getattr(pipe, method)(*args)
            return list(await pipe.execute(raise_on_error=False))


async def _or_fail(batch: Batch, work: Awaitable[T]) -> T | None:
    """``work``'s result; if it fails, every request of ``batch`` fails with its error (or is
    cancelled with it) and None comes back."""
    try:
        return await work
    except asyncio.CancelledError:
        _cancel(batch)
        raise
    except Exception as exc:
        _fail(batch, exc)
        return None


def _cancel(batch: Batch) -> None:
    for _, future in batch:
        future.cancel()


def _fail(batch: Batch, exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


def _answer(batch: Batch, replies: list[Any], *, keep_elsewhere: bool) -> Batch:
    """Give each request of ``batch`` its replies; those to send again (a reply
    `served_elsewhere`, when ``keep_elsewhere``) come back instead."""
    again: Batch = []
    start = 0
    for commands, future in batch:
        end = start + len(commands)
        mine, start = replies[start:end], end
        if keep_elsewhere and any(served_elsewhere(reply) for reply in mine):
            again.append((commands, future))
        elif not future.done():  # else its caller was cancelled meanwhile
            future.set_result(mine)
    return again


def _by_slot(queued: Batch) -> dict[int, Batch]:
    """The requests of a flush by the slot of their keys (a request is one run's, and every
    key of a run is in its partition's slot); a request of no key at all (no commands: a read
    of no records; only steps with nothing to write) goes to slot 0's master, which runs it
    as well as any."""
    grouped: dict[int, Batch] = {}
    for request in queued:
        try:
            slots = [_slot_of(command) for command in request[0]]
        except Exception as exc:  # a malformed request fails its caller, never hangs it
            _fail([request], exc)
            continue
        slot = next((s for s in slots if s is not None), 0)
        grouped.setdefault(slot, []).append(request)
    return grouped


def _slot_of(command: Command) -> int | None:
    """The slot of ``command``'s keys; None if it has none (a step of no key)."""
    method, *args = command
    if method == "apply":
        slot: int | None = args[0].slot
        return slot
    if method == "evalsha":
        return slot_of(str(args[2])) if args[1] else None
    return slot_of(str(args[0]))


def _then_wait(queued: Batch, confirm: Confirm, group: bool) -> Batch:
    """The flush, then ``WAIT``: each request's replies are held until it answers."""
    held = [(commands, _Held(replies)) for commands, replies in queued]
    replicas, timeout_ms = confirm
    release = _AfterWait([h for _, h in held])
    return [*merge_steps(held, group=group), ((("wait", replicas, timeout_ms),), release)]


class _Held:
    """A request's replies, kept until its flush's WAIT answered; an error goes on at once."""

    __slots__ = ("future", "replies")

    def __init__(self, future: Replies) -> None:
        self.future = future
        self.replies: list[Any] | None = None

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, result: list[Any]) -> None:
        self.replies = result

    def set_exception(self, exception: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exception)

    def cancel(self) -> bool:
        return self.future.cancel()


class _AfterWait:
    """The WAIT's replies: each held request gets its own with WAIT's reply (the number of
    replicas that confirmed, or its error) appended; if the WAIT fails, they all fail."""

    __slots__ = ("_done", "_held")

    def __init__(self, held: list[_Held]) -> None:
        self._held = held
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: list[Any]) -> None:
        self._done = True
        for held in self._held:
            if held.replies is not None and not held.future.done():
                held.future.set_result([*held.replies, *result])

    def set_exception(self, exception: BaseException) -> None:
        self._done = True
        for held in self._held:
            held.set_exception(exception)

    def cancel(self) -> bool:
        self._done = True
        for held in self._held:
            held.cancel()
        return True
