"""A bare RESP2 connection for the ledger's hot commands, packed and parsed by hiredis.

Commands are written back to back and Redis answers in order, so a reply is matched to its
request by position: a FIFO of waiting requests, nothing else.  Replies take the shapes
redis-py gives for the same commands (bytes, lists, ``HGETALL`` as a dict; an error reply
becomes one of redis-py's public exception classes, e.g. `NoScriptError`), so callers cannot
tell which path answered.  A lost connection fails every request still waiting with redis-py's
`ConnectionError`, like a failed pipeline; the next flush connects again.

Only plain TCP to one fixed address, speaking RESP2 with bytes replies, takes this path
(`wire_address`); TLS, Unix sockets and a Sentinel-managed master use redis-py
(`callgate.ledger.pipeline` says which, once, at start-up).  A Sentinel client's master moves
on a failover: redis-py's `SentinelManagedConnection` asks the sentinels on every connect and
drops a connection that meets a demoted master, and this path would need a second copy of
that; the fast path's gain is latency (README: Performance), not throughput.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import hiredis
import redis.asyncio as aioredis
from redis import exceptions
from redis.exceptions import ConnectionError as RedisConnectionError

from callgate.connect import RedisClient

_ERROR_CLASSES: dict[str, type[exceptions.RedisError]] = {
    "NOSCRIPT": exceptions.NoScriptError,
    "READONLY": exceptions.ReadOnlyError,
    "NOPERM": exceptions.NoPermissionError,
    "EXECABORT": exceptions.ExecAbortError,
    "LOADING": exceptions.BusyLoadingError,
    "OOM": exceptions.OutOfMemoryError,
}
"""Error reply prefix → the public redis-py class the same reply becomes on redis-py's path
(the ones a ledger command can meet; every other error is a `ResponseError`)."""


def _error(reply: str) -> Exception:
    """The exception redis-py raises for this error reply."""
    code, _, message = reply.partition(" ")
    if code in ("NOAUTH", "WRONGPASS"):
        return exceptions.AuthenticationError(message)
    cls = _ERROR_CLASSES.get(code)
    return cls(message) if cls is not None else exceptions.ResponseError(reply)


def _pairs(reply: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(reply[::2], reply[1::2], strict=True))


WIRE_COMMANDS: dict[str, tuple[bytes, Callable[[Any], Any] | None]] = {
    "hgetall": (b"HGETALL", _pairs),
    "hget": (b"HGET", None),
    "hmget": (b"HMGET", None),
    "lrange": (b"LRANGE", None),
    "exists": (b"EXISTS", None),
    "evalsha": (b"EVALSHA", None),
    "get": (b"GET", None),
    "incr": (b"INCR", None),
    "rpush": (b"RPUSH", None),
    "wait": (b"WAIT", None),
}
"""Pipeline method name → the command sent and how its reply becomes redis-py's shape."""


@dataclass(frozen=True, slots=True)
class WireAddress:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None


def wire_address(redis: RedisClient) -> WireAddress | None:
    """Where ``redis`` connects, if it is plain TCP to one fixed address speaking RESP2 with
    bytes replies: not a cluster, whose commands go to the master of each key's slot."""
    if not isinstance(redis, aioredis.Redis):
        return None
    pool = redis.connection_pool
    kwargs = pool.connection_kwargs
    if pool.connection_class is not aioredis.Connection:
        return None  # TLS, a Unix socket or a Sentinel-managed master: redis-py's path
    if kwargs.get("decode_responses") or kwargs.get("protocol") not in (None, 2, "2"):
        return None
    return WireAddress(
        host=str(kwargs.get("host", "localhost")),
        port=int(kwargs.get("port", 6379)),
        db=int(kwargs.get("db", 0) or 0),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
    )


class Replies(Protocol):
    """Where a request's replies go: its caller's future, or what hands them on to several
    callers (`callgate.ledger.group`)."""

    def done(self) -> bool: ...
    def set_result(self, result: list[Any], /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...
    def cancel(self) -> bool: ...


class _Waiting:
    __slots__ = ("future", "replies", "transforms")

    def __init__(self, future: Replies, transforms: list[Callable[[Any], Any] | None]) -> None:
        self.future = future
        self.transforms = transforms
        self.replies: list[Any] = []


class Wire(asyncio.Protocol):
    """One connection; `send` writes a whole flush in one write."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._reader = hiredis.Reader()
        self._waiting: deque[_Waiting] = deque()
        self._transport: asyncio.Transport | None = None

    @classmethod
    async def connect(cls, address: WireAddress) -> Wire:
        loop = asyncio.get_running_loop()
        try:
            _, wire = await loop.create_connection(lambda: cls(loop), address.host, address.port)
        except OSError as exc:
            raise RedisConnectionError(
                f"cannot connect to Redis at {address.host}:{address.port}: {exc}"
            ) from exc
        try:
            await wire._handshake(address)
        except BaseException:
            wire.close()
            raise
        return wire

    async def _handshake(self, address: WireAddress) -> None:
        commands: list[tuple[Any, ...]] = []
        if address.password is not None:
            user = () if address.username is None else (address.username,)
            commands.append((b"AUTH", *user, address.password))
        if address.db:
            commands.append((b"SELECT", address.db))
        if not commands:
            return
        for reply in await self.request(commands, [None] * len(commands)):
            if isinstance(reply, Exception):
                raise reply

    # asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            waiting = self._waiting[0]
            transform = waiting.transforms[len(waiting.replies)]
            if isinstance(reply, hiredis.ReplyError):
                reply = _error(str(reply))
            elif transform is not None:
                reply = transform(reply)
            waiting.replies.append(reply)
            if len(waiting.replies) == len(waiting.transforms):
                self._waiting.popleft()
                if not waiting.future.done():  # else its caller stopped waiting
                    waiting.future.set_result(waiting.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        lost = RedisConnectionError(f"lost the connection to Redis: {exc or 'closed'}")
        while self._waiting:
            future = self._waiting.popleft().future
            if not future.done():
                future.set_exception(lost)

    # ------------------------------------------------------------------------------------

    def usable(self) -> bool:
        """Connected, and on the loop that is running now (a new loop needs a new one)."""
        if self._transport is None or self._transport.is_closing():
            return False
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def send(self, batch: Sequence[tuple[Sequence[tuple[Any, ...]], Replies]]) -> None:
        """Write every request of ``batch``; each future gets its requests' replies.

        A request that cannot be packed (an argument Redis has no form for) fails alone,
        before anything of it is written."""
        chunks: list[bytes] = []
        for commands, future in batch:
            if not commands:  # nothing to wait for: no reply will come
                if not future.done():
                    future.set_result([])
                continue
            transforms: list[Callable[[Any], Any] | None] = []
            packed: list[bytes] = []
            try:
                for method, *args in commands:
                    name, transform = WIRE_COMMANDS[method]
                    packed.append(hiredis.pack_command((name, *args)))
                    transforms.append(transform)
            except (TypeError, ValueError, hiredis.HiredisError) as exc:
                if not future.done():
                    future.set_exception(exc)
                continue
            chunks += packed
            self._waiting.append(_Waiting(future, transforms))
        if chunks:
            self._write(b"".join(chunks))

    def request(
        self, commands: list[tuple[Any, ...]], transforms: list[Callable[[Any], Any] | None]
    ) -> asyncio.Future[list[Any]]:
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        self._waiting.append(_Waiting(future, transforms))
        self._write(b"".join(hiredis.pack_command(c) for c in commands))
        return future

    def _write(self, data: bytes) -> None:
        if self._transport is None:
            self.connection_lost(None)
            return
        self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


StreamEntries = list[list[Any]]
"""XREADGROUP's reply as redis-py (RESP2) gives it: [[stream, [(id, fields), …]], …]."""


def _entries(reply: list[Any] | None) -> StreamEntries:
    return [
        [name, [(entry_id, _pairs(fields or [])) for entry_id, fields in entries]]
        for name, entries in reply or []
    ]


class BlockingReads:
    """XREADGROUP … BLOCK on a connection of its own: a blocked read holds its connection,
    so it must never share one with the commands `AutoPipeline` coalesces."""

    def __init__(self, address: WireAddress) -> None:
        self._address = address
        self._wire: Wire | None = None

    async def xreadgroup(
        self, group: str, consumer: str, streams: Sequence[str], count: int, block_ms: int
    ) -> StreamEntries:
        if self._wire is None or not self._wire.usable():
            self.close()
            self._wire = await Wire.connect(self._address)
        command = (
            b"XREADGROUP",
            b"GROUP",
            group,
            consumer,
            b"COUNT",
            count,
            b"BLOCK",
            block_ms,
            b"STREAMS",
            *streams,
            *([b">"] * len(streams)),
        )
        try:
            [reply] = await self._wire.request([command], [_entries])
        except asyncio.CancelledError:
            self.close()  # the reply would deliver entries nobody handles: drop it with the link
            raise
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None
