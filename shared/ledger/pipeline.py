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
fixed address (TLS, a Unix socket, a master found through Sentinel), every flush takes
redis-py's pipeline instead; replies are the same either way, and which transport runs is
logged once.

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

import redis.asyncio as aioredis

from callgate.ledger.group import merge_steps
from callgate.ledger.wire import WIRE_COMMANDS, Replies, Wire, WireAddress, wire_address

log = logging.getLogger("callgate.ledger")
Transport = Literal["hiredis", "redis-py"]

Command = tuple[Any, ...]
"""``(pipeline method name, *args)``, e.g. ``("hgetall", key)``, or ``("apply", tx)``: a
ledger step, which goes with the flush's other steps in one script call (`merge_steps`)."""

Batch = list[tuple[Sequence[Command], Replies]]
Confirm = tuple[int, int]
"""``(replicas, timeout_ms)`` of the ``WAIT`` a confirming pipeline ends each flush with."""
T = TypeVar("T")


class AutoPipeline:
    """Coalesces the requests of one event loop iteration into one pipelined round trip."""

    def __init__(
        self,
        redis: aioredis.Redis,
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
            if self._address is None:
                log.info(
                    "ledger commands use redis-py: the connection is TLS, a Unix socket "
                    "or a master found through Sentinel"
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
        if self._confirm is None:
            batch = merge_steps(queued, group=self._group)
        else:
            batch = _then_wait(queued, self._confirm, self._group)
        if self._address is not None:
            wire = self._wire
            if wire is not None and wire.usable():
                self.flushes += 1
                wire.send(batch)
                return
            self._spawn(self._send_after_connecting(batch))
            return
        self._spawn(self._execute(batch))

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

    async def _execute(self, batch: Batch) -> None:
        replies = await _or_fail(batch, self._pipelined(batch))
        if replies is None:
            return
        self.flushes += 1
        start = 0
        for commands, future in batch:
            end = start + len(commands)
            if not future.done():  # else its caller was cancelled meanwhile
                future.set_result(replies[start:end])
            start = end

    async def _pipelined(self, batch: Batch) -> list[Any]:
        async with self._redis.pipeline(transaction=False) as pipe:
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
