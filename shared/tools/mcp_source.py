"""MCP servers' tools as callgate `Tool`s (README: Tools from MCP servers).

At worker start `open_mcp_tools` connects to each server the deployment lists, reads its tool
list once and builds a `Tool` per tool: the argument model from the server's schema
(`mcp_schema`), the effect from its annotations and the server's trust (`mcp_servers`), the
execute and reconcile hooks calling the server through the process's one `McpConnection`.
The registry is not refreshed on ``notifications/tools/list_changed``: a server's new or
changed tools are seen when the workers restart.

A server that cannot be reached at start is logged and its tools are not registered (a run
naming them is refused at ingress); a worker never fails to start because a server is down.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types
import orjson
from pydantic import BaseModel

from callgate.errors import ToolError
from callgate.logs import log_fields
from callgate.records import Effect
from callgate.tools.contract import Reconciliation, Tool, ToolContext
from callgate.tools.mcp_connection import McpConnection
from callgate.tools.mcp_schema import SchemaError, args_model_from_schema
from callgate.tools.mcp_servers import OPERATION_META_KEY, McpServer, choose_effect

__all__ = ["McpTools", "build_tool", "open_mcp_tools"]

log = logging.getLogger("callgate.mcp")


@dataclass
class McpTools:
    """The tools of every reachable server, each with where it came from, and the sessions
    to close on shutdown."""

    tools: list[tuple[Tool[Any], str]] = field(default_factory=list)
    connections: list[McpConnection] = field(default_factory=list)

    async def close(self) -> None:
        for connection in self.connections:
            await connection.close()


async def open_mcp_tools(servers: tuple[McpServer, ...], default_timeout_s: float) -> McpTools:
    """Connect to ``servers`` and build their tools; unreachable servers are skipped."""
    opened = McpTools()
    for server in servers:
        connection = McpConnection(server)
        opened.connections.append(connection)
        try:
            listed = await connection.list_tools()
        except Exception as exc:  # a down server must not stop the worker
            log.warning("mcp server unreachable at start; its tools are not registered",
                        extra=log_fields(server=server.name, reason=repr(exc)[:200]))
            continue
        timeout_s = server.timeout_s or default_timeout_s
        missing = sorted(set(server.lookups.values()) - {remote.name for remote in listed})
        if missing:  # still fail-closed: a lookup that cannot answer leaves the outcome unknown
            log.warning("mcp lookups name tools the server does not list", extra=log_fields(
                server=server.name, lookups=missing))
        for remote in listed:
            try:
                built = build_tool(server, connection, remote, timeout_s)
            except (SchemaError, ValueError) as exc:
                log.warning("mcp tool not registered", extra=log_fields(
                    server=server.name, tool=remote.name, reason=str(exc)[:300]))
                continue
            opened.tools.append(built)
    return opened


def build_tool(
    server: McpServer, connection: McpConnection, remote: mcp_types.Tool, timeout_s: float
) -> tuple[Tool[Any], str]:
    """The `Tool` for ``remote`` and its registry source (server, effect and why)."""
    annotations = (remote.annotations.model_dump(by_alias=True, exclude_none=True)
                   if remote.annotations is not None else None)
    choice = choose_effect(annotations, server.trusted)
    name = f"{server.tool_prefix}{remote.name}"
    lookup = server.lookups.get(remote.name)
    call = _Call(connection, remote.name, choice.effect)
    reconcile: Callable[..., Awaitable[Reconciliation]] | None = None
    reason = choice.reason
    if choice.effect is Effect.WRITE:
        reconcile = _Lookup(connection, lookup) if lookup else _no_lookup
        reason += (f"; reconciled by lookup {lookup}" if lookup
                   else "; no lookup: a lost answer waits for a person")
    tool: Tool[Any] = Tool(
        name=name,
        version=_version(remote),
        description=remote.description or remote.title or f"{remote.name} (MCP {server.name})",
        args_model=args_model_from_schema(name, dict(remote.input_schema)),
        effect=choice.effect,
        execute=call,
        reconcile=reconcile,
        timeout_s=timeout_s,
        origin=f"mcp {server.name}: {choice.effect.value} ({reason})",
    )
    return tool, f"mcp:{server.name}, {choice.effect.value}: {reason}"


def _version(remote: mcp_types.Tool) -> str:
    """Changes when anything the model or the effect depends on changes."""
    shown = remote.model_dump(mode="json", include={"name", "description", "input_schema",
                                                    "annotations"})
    return hashlib.sha256(orjson.dumps(shown, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def _arguments(args: BaseModel) -> dict[str, Any]:
    return args.model_dump(mode="json", exclude_none=True)


def to_result(result: mcp_types.CallToolResult) -> dict[str, Any]:
    """The tool's answer as callgate's JSON result; an ``isError`` result is a `ToolError`."""
    text = "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
    if result.is_error:
        raise ToolError(text[:500] or "the MCP tool reported an error")
    if isinstance(result.structured_content, dict):
        return dict(result.structured_content)
    return {"content": text}


@dataclass(frozen=True, slots=True)
class _Call:
    """`Tool.execute`: ``tools/call`` with the operation id in ``_meta`` for any effect but a
    read; only a read is resent after a broken session."""

    connection: McpConnection
    remote_name: str
    effect: Effect

    async def __call__(
        self, ctx: ToolContext, args: BaseModel, operation_id: str
    ) -> dict[str, Any]:
        is_read = self.effect is Effect.READ
        meta = None if is_read else {OPERATION_META_KEY: operation_id}
        result = await self.connection.call(self.remote_name, _arguments(args), meta, retry=is_read)
        return to_result(result)


@dataclass(frozen=True, slots=True)
class _Lookup:
    """`Tool.reconcile` through the server's lookup tool: ``{"applied": bool, "result"}``."""

    connection: McpConnection
    lookup: str

    async def __call__(
        self, ctx: ToolContext, args: BaseModel, operation_id: str
    ) -> Reconciliation:
        try:
            result = await self.connection.call(
                self.lookup, {"operation_id": operation_id}, None, retry=True)
            answer = to_result(result)
        except Exception as exc:  # the question is open, not answered
            log.info("mcp lookup inconclusive", extra=log_fields(
                lookup=self.lookup, reason=type(exc).__name__))
            return Reconciliation("unknown")
        applied = answer.get("applied")
        if applied is True:
            payload = answer.get("result")
            return Reconciliation("applied", payload if isinstance(payload, dict) else {})
        return Reconciliation("not_applied") if applied is False else Reconciliation("unknown")


async def _no_lookup(ctx: ToolContext, args: BaseModel, operation_id: str) -> Reconciliation:
    """A write with no lookup declared: nobody can say, so a person must (the run pauses)."""
    return Reconciliation("unknown")
