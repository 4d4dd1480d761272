"""One MCP server's session in one worker process, opened at start and re-opened when broken.

The `mcp` SDK's `Client` is an async context whose transport runs in anyio task groups, which
must be left by the task that entered them; so each connection lives in a holder task that
enters the client, reports it ready and waits to be told to close.  Calls come from any task.

Broken sessions: a server that died (a stdio child gone) or restarted and no longer knows the
session makes the next call on it fail.  A session known broken before a call (its holder
ended, or it does not answer the ping sent before each write) is re-opened first, which is safe
for any effect: nothing was sent.  A call that fails in flight is retried once on a fresh
session only when ``retry`` allows (reads); for a write the error goes up, because the request
may have been applied — the executor makes that ``unknown`` and the reconciler asks.  A server
that cannot be reached at all is a `ToolError` (``unavailable``): nothing was sent, the model is
told.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import ListenNotSupportedError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from callgate.errors import ToolError
from callgate.logs import log_fields
from callgate.telemetry import spans
from callgate.tools.mcp_servers import McpServer

__all__ = ["McpConnection"]

log = logging.getLogger("callgate.mcp")

CONNECT_TIMEOUT_S = 5.0
"""How long opening a session (process start or HTTP handshake) may take."""
CLOSE_TIMEOUT_S = 2.0
PING_TIMEOUT_S = 1.0
"""How long a session may take to answer the ping sent before a write."""
CONNECT_MODE: Literal["auto", "legacy"] = "auto"
"""How the SDK negotiates the protocol: probe for 2026-07-28, else the initialize handshake."""
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Between attempts to reach a server that went away (the last one repeats)."""


class McpConnection:
    """The session with ``server`` this process uses for every call of its tools."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._lock = asyncio.Lock()
        self._opened = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.on_tools_changed: Callable[[], Coroutine[Any, Any, Any]] | None = None
        """Called when the server's tool list may have changed (set by the tool source)."""

    async def open(self) -> None:
        """Open the session (raises what the SDK raised when the server cannot be reached)."""
        self._closing = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(
            self._hold(ready, self._closing), name=f"mcp-{self.server.name}"
        )
        await asyncio.wait_for(asyncio.shield(ready), CONNECT_TIMEOUT_S)

    async def _hold(self, ready: asyncio.Future[None], closing: asyncio.Event) -> None:
        try:
            async with Client(
                self._target(), mode=CONNECT_MODE, message_handler=self._on_message
            ) as client:
                self._client = client
                listener = asyncio.create_task(self._listen(client))
                ready.set_result(None)
                self._opened += 1
                if self._opened > 1:  # what changed while the session was away is not replayed
                    self._tools_changed()
                try:
                    await closing.wait()
                finally:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener
        except BaseException as exc:  # reported to the opener or logged
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
            else:
                log.info(
                    "mcp session ended",
                    extra=log_fields(server=self.server.name, reason=type(exc).__name__),
                )
        finally:
            self._client = None

    async def _listen(self, client: Client) -> None:
        """Follow the server's ``tools/list_changed`` for as long as the session lives.  A
        server that does not take the subscription (an older protocol, or it refuses) is left
        alone; one whose acknowledged stream ends has gone away: re-open and read again."""
        listening = False
        try:
            async with client.listen(tools_list_changed=True) as changes:
                listening = True
                async for _ in changes:
                    self._tools_changed()
        except ListenNotSupportedError:
            return  # an older server: its notifications come through `_on_message`
        except Exception as exc:
            log.info(
                "mcp tool list not followed",
                extra=log_fields(
                    server=self.server.name, reason=type(exc).__name__, was_listening=listening
                ),
            )
        if listening and self._client is client:  # the stream ended, the session did not
            self._mark_broken(client)
            self.keep_trying()

    async def _on_message(self, message: object) -> None:
        """An older protocol's ``notifications/tools/list_changed``, sent on the session."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed()

    def keep_trying(self) -> None:
        """Re-open the session in the background until the server answers, then re-read its
        tools (nothing to do while an attempt is under way or after `shutdown`)."""
        if self.on_tools_changed is not None and not any(
            task.get_name().endswith("-reopen") for task in self._tasks
        ):
            self._spawn(self._reopen(), "reopen")

    async def _reopen(self) -> None:
        for attempt in itertools.count():
            await asyncio.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
            try:
                await self._session()
            except ToolError:
                continue
            self._tools_changed()
            return

    def _tools_changed(self) -> None:
        """Rebuild the server's tools in a task of its own (the rebuild itself calls the
        server, which must not wait on the task that reads its answers)."""
        if self.on_tools_changed is not None:
            self._spawn(self.on_tools_changed(), "tools")

    def _spawn(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        task = asyncio.create_task(work, name=f"mcp-{self.server.name}-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _target(self) -> str | StdioServerParameters:
        if self.server.url is not None:
            return self.server.url
        command = self.server.command or ("",)
        return StdioServerParameters(command=command[0], args=list(command[1:]))

    async def close(self) -> None:
        """End the session; safe to call twice."""
        holder, self._holder = self._holder, None
        self._closing.set()
        if holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(holder, CLOSE_TIMEOUT_S)

    async def shutdown(self) -> None:
        """The worker is stopping: no more tool list rebuilds, then `close`."""
        self.on_tools_changed = None
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self.close()

    async def _session(self, *, fresh: bool = False) -> Client:
        """A live client: re-opened when ``fresh`` or its holder ended; `ToolError` if the
        server cannot be reached."""
        async with self._lock:
            alive = self._holder is not None and not self._holder.done()
            if fresh or not alive or self._client is None:
                await self.close()
                try:
                    await self.open()
                except Exception as exc:
                    await self.close()
                    raise ToolError(
                        f"MCP server {self.server.name!r} is unavailable ({type(exc).__name__})",
                        code="unavailable",
                    ) from exc
            assert self._client is not None
            return self._client

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages)."""
        client = await self._session()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, *, retry: bool
    ) -> mcp_types.CallToolResult:
        """``tools/call``, in a ``tools/call {name}`` span whose context rides in ``_meta``
        (W3C ``traceparent``) while tracing is on."""
        with spans.mcp_call(self.server.name, name):
            return await self._call(name, arguments, spans.traced_meta(meta), retry=retry)

    async def _call(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, *, retry: bool
    ) -> mcp_types.CallToolResult:
        """A read (``retry``) that finds the session broken is sent once more on a fresh one.
        A write is sent only on a session that just answered a ping, so a session that broke
        while idle is re-opened before anything is sent, not after."""
        client = await self._session()
        if not retry and not await self._answers(client):
            client = await self._session(fresh=True)
        try:
            return await client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
        except Exception as exc:
            if not retry:
                self._mark_broken(client)
                raise
            log.info(
                "mcp call failed; reconnecting once",
                extra=log_fields(server=self.server.name, tool=name, reason=type(exc).__name__),
            )
        client = await self._session(fresh=True)
        return await client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]

    async def _answers(self, client: Client) -> bool:
        """Whether the server answers on this session: any answer counts, even "method not
        found" (a 2026-07-28 server no longer serves ``ping``, but it answered)."""
        try:
            await asyncio.wait_for(client.session.send_ping(), PING_TIMEOUT_S)
        except MCPError as exc:
            return exc.code != CONNECTION_CLOSED
        except Exception:  # no answer: the session cannot be trusted with a write
            return False
        return True

    def _mark_broken(self, client: Client) -> None:
        """The next call re-opens the session (this one's state is no longer known)."""
        if self._client is client:
            self._client = None
            self._closing.set()
