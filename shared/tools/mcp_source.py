"""MCP servers' tools as callgate `Tool`s (README: Tools from MCP servers).

At worker start `open_mcp_tools` connects to each server the deployment lists, reads its tool
list and builds a `Tool` per tool: the argument model from the server's schema
(`mcp_schema`), the effect from its annotations and the server's trust, or from the
deployment's local policy (`mcp_servers`, `mcp_policy`), the execute and reconcile hooks
calling the server through the process's one `McpConnection`.  When a server says its tool list
changed (``tools/list_changed``) or a session is re-opened, the list is read again and the
server's tools rebuilt; a tool whose schema, description or hints changed gets a new version,
so an approval bound to the old one no longer lets a call run.

A server that cannot be reached at start is logged and its tools are not registered until it
answers (the connection keeps trying; until then a run naming them is refused at ingress); a
worker never fails to start because a server is down.
A function the deployment's policy names that does not import is a `HookError`: the worker
refuses to start, as with a tool module that does not import.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
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
from callgate.tools.mcp_policy import is_function_ref, policy_hooks, resolve_hooks
from callgate.tools.mcp_schema import SchemaError, args_model_from_schema
from callgate.tools.mcp_servers import OPERATION_META_KEY, McpServer, McpToolPolicy, choose_effect

__all__ = ["McpTools", "build_tool", "open_mcp_tools"]

log = logging.getLogger("callgate.mcp")

Built = tuple[Tool[Any], str]
"""A tool and its registry source (server, effect and why)."""


@dataclass
class McpTools:
    """The tools of every reachable server, each with where it came from; the sessions to
    close on shutdown; ``on_change`` is called after a server's tools were rebuilt."""

    by_server: dict[str, list[Built]] = field(default_factory=dict)
    connections: list[McpConnection] = field(default_factory=list)
    on_change: Callable[[], None] | None = None
    default_timeout_s: float = 2.0
    hooks: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def tools(self) -> list[Built]:
        return [built for tools in self.by_server.values() for built in tools]

    async def close(self) -> None:
        for connection in self.connections:
            await connection.shutdown()

    async def refresh(self, connection: McpConnection) -> bool:
        """Read ``connection``'s server's tool list again and rebuild its tools; False when the
        server could not be asked (its tools stay as they were)."""
        server = connection.server
        try:
            listed = await connection.list_tools()
        except Exception as exc:  # a down server must not stop the worker
            log.warning(
                "mcp server unreachable; its tools are not (re)read",
                extra=log_fields(server=server.name, reason=repr(exc)[:200]),
            )
            return False
        before = {tool.name: tool.version for tool, _ in self.by_server.get(server.name, [])}
        self.by_server[server.name] = _build_all(
            server, connection, listed, server.timeout_s or self.default_timeout_s, self.hooks
        )
        after = {tool.name: tool.version for tool, _ in self.by_server[server.name]}
        if before and before != after:  # the first listing is logged by the worker's start
            log.info("mcp tools changed", extra=log_fields(server=server.name, tools=after))
        if before != after and self.on_change is not None:
            self.on_change()
        return True


async def open_mcp_tools(servers: tuple[McpServer, ...], default_timeout_s: float) -> McpTools:
    """Connect to ``servers`` and build their tools; unreachable servers are skipped.  Raises
    `HookError` when a function a server's policy names does not import."""
    opened = McpTools(default_timeout_s=default_timeout_s)
    for server in servers:
        opened.hooks.update(resolve_hooks(server))
    for server in servers:
        connection = McpConnection(server)
        connection.on_tools_changed = _refresher(opened, connection)
        opened.connections.append(connection)
        if not await opened.refresh(connection):
            connection.keep_trying()  # its tools join when it answers
    return opened


def _refresher(
    opened: McpTools, connection: McpConnection
) -> Callable[[], Coroutine[Any, Any, bool]]:
    async def refresh() -> bool:
        return await opened.refresh(connection)

    return refresh


def _build_all(
    server: McpServer,
    connection: McpConnection,
    listed: list[mcp_types.Tool],
    timeout_s: float,
    hooks: dict[str, Callable[..., Any]],
) -> list[Built]:
    names = {remote.name for remote in listed}
    lookups = {
        policy.lookup
        for policy in server.tools.values()
        if policy.lookup and not is_function_ref(policy.lookup)
    }
    missing = sorted((lookups | set(server.tools)) - names)
    if missing:  # still fail-closed: a lookup that cannot answer leaves the outcome unknown
        log.warning(
            "mcp policies name tools the server does not list",
            extra=log_fields(server=server.name, tools=missing),
        )
    built = []
    for remote in listed:
        try:
            built.append(build_tool(server, connection, remote, timeout_s, hooks))
        except (SchemaError, ValueError) as exc:
            log.warning(
                "mcp tool not registered",
                extra=log_fields(server=server.name, tool=remote.name, reason=str(exc)[:300]),
            )
    return built


def build_tool(
    server: McpServer,
    connection: McpConnection,
    remote: mcp_types.Tool,
    timeout_s: float,
    hooks: dict[str, Callable[..., Any]] | None = None,
) -> Built:
    """The `Tool` for ``remote`` and its registry source (server, effect and why); ``hooks``
    are the functions ``server``'s policies name, imported here when not given."""
    hooks = resolve_hooks(server) if hooks is None else hooks
    annotations = (
        remote.annotations.model_dump(by_alias=True, exclude_none=True)
        if remote.annotations is not None
        else None
    )
    policy = server.tools.get(remote.name, McpToolPolicy())
    choice = choose_effect(annotations, server.trusted, policy.effect)
    name = f"{server.tool_prefix}{remote.name}"
    args_model = args_model_from_schema(name, dict(remote.input_schema))
    reconcile, how = _reconcile(connection, choice.effect, policy.lookup, hooks)
    reason = choice.describe() + how
    tool: Tool[Any] = Tool(
        name=name,
        version=_version(remote, policy),
        description=remote.description or remote.title or f"{remote.name} (MCP {server.name})",
        args_model=args_model,
        effect=choice.effect,
        execute=_Call(connection, remote.name, choice.effect),
        reconcile=reconcile,
        timeout_s=timeout_s,
        origin=f"mcp {server.name}: {choice.effect.value} ({reason})",
        effect_source=reason,
        **policy_hooks(server, policy, args_model, hooks),
    )
    return tool, f"mcp:{server.name}, {choice.effect.value}: {reason}"


def _reconcile(
    connection: McpConnection,
    effect: Effect,
    lookup: str | None,
    hooks: dict[str, Callable[..., Any]],
) -> tuple[Callable[..., Awaitable[Reconciliation]] | None, str]:
    """A write's reconcile hook and how it reconciles; an idempotent write with no lookup is
    sent again under its operation id, a read has none."""
    if effect is Effect.READ:
        return None, ""
    if lookup is not None and is_function_ref(lookup):
        return hooks[lookup], f"; reconciled by {lookup}"
    if lookup is not None:
        return _Lookup(connection, lookup), f"; reconciled by lookup {lookup}"
    if effect is Effect.IDEMPOTENT_WRITE:
        return None, ""
    return _no_lookup, "; no lookup: a lost answer waits for a person"


def _version(remote: mcp_types.Tool, policy: McpToolPolicy) -> str:
    """Changes when anything the model, the effect or the local policy depends on changes."""
    shown = remote.model_dump(
        mode="json", include={"name", "description", "input_schema", "annotations"}
    )
    shown["policy"] = policy.model_dump(mode="json")
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
                self.lookup, {"operation_id": operation_id}, None, retry=True
            )
            answer = to_result(result)
        except Exception as exc:  # the question is open, not answered
            log.info(
                "mcp lookup inconclusive",
                extra=log_fields(lookup=self.lookup, reason=type(exc).__name__),
            )
            return Reconciliation("unknown")
        applied = answer.get("applied")
        if applied is True:
            payload = answer.get("result")
            return Reconciliation("applied", payload if isinstance(payload, dict) else {})
        return Reconciliation("not_applied") if applied is False else Reconciliation("unknown")


async def _no_lookup(ctx: ToolContext, args: BaseModel, operation_id: str) -> Reconciliation:
    """A write with no lookup declared: nobody can say, so a person must (the run pauses)."""
    return Reconciliation("unknown")
