"""The deployment's local policy for an MCP server's tool, made into `Tool` hooks (README: Tools
from MCP servers).

A server's tool arrives with a schema and hints; what decides whether a call may run (approval,
authorization, the resource its writes order on, what is never logged) comes from the
deployment's server entry (`McpToolPolicy`), never from the server.  A function it names
(``authorize``, a local ``lookup``) is imported here, when the worker starts, from the
deployment's own list: a run or a message only selects a tool by name and cannot reach this.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from callgate.tools.contract import Identity
from callgate.tools.mcp_servers import FUNCTION_REF, McpServer, McpToolPolicy

__all__ = ["HookError", "import_hook", "is_function_ref", "policy_hooks", "resolve_hooks"]


class HookError(ValueError):
    """A function the deployment's server list names does not import or is not callable."""


def is_function_ref(ref: str) -> bool:
    """Whether ``ref`` names a ``module:function`` (not a tool on the server)."""
    return ":" in ref


def import_hook(ref: str, *, coroutine: bool = False) -> Callable[..., Any]:
    """The function ``module:function`` names; `HookError` saying why when it cannot be used."""
    if not re.fullmatch(FUNCTION_REF, ref):
        raise HookError(f"{ref!r} is not module:function")
    module_name, _, attribute = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HookError(f"{ref}: module does not import ({exc})") from exc
    function = getattr(module, attribute, None)
    if not callable(function):
        raise HookError(f"{ref}: no such function")
    if coroutine and not inspect.iscoroutinefunction(function):
        raise HookError(f"{ref}: a lookup must be an async function (ctx, args, operation_id)")
    return function  # type: ignore[no-any-return]


def resolve_hooks(server: McpServer) -> dict[str, Callable[..., Any]]:
    """Every function ``server``'s policies name, imported once (by ref); raises `HookError`,
    so a deployment whose list names a missing function does not start half-configured."""
    hooks: dict[str, Callable[..., Any]] = {}
    for name, policy in server.tools.items():
        try:
            if policy.authorize is not None:
                hooks[policy.authorize] = import_hook(policy.authorize)
            if policy.lookup is not None and is_function_ref(policy.lookup):
                hooks[policy.lookup] = import_hook(policy.lookup, coroutine=True)
        except HookError as exc:
            raise HookError(f"MCP server {server.name!r}, tool {name!r}: {exc}") from exc
    return hooks


def policy_hooks(
    server: McpServer,
    policy: McpToolPolicy,
    args_model: type[BaseModel],
    hooks: dict[str, Callable[..., Any]],
) -> dict[str, Any]:
    """The `Tool` keyword arguments ``policy`` sets: approval, resource key, authorization,
    sensitive fields.  `ValueError` when it names an argument the tool does not take."""
    kwargs: dict[str, Any] = {}
    if policy.approval is not None:
        kwargs["approval"] = _Approval(policy.approval)
    if policy.resource_key is not None:
        if policy.resource_key not in args_model.model_fields:
            raise ValueError(f"resource_key {policy.resource_key!r} is not an argument")
        kwargs["resource_key"] = _ResourceKey(server.name, policy.resource_key)
    if policy.authorize is not None:
        kwargs["authorize"] = hooks[policy.authorize]
    if policy.sensitive:
        kwargs["sensitive_fields"] = frozenset(policy.sensitive)
    return kwargs


class _Approval:
    """Every call needs a person holding ``role``."""

    def __init__(self, role: str) -> None:
        self.role = role

    def __call__(self, identity: Identity, args: BaseModel) -> str | None:
        return self.role


class _ResourceKey:
    """Writes with the same value of ``argument`` on one server run in order."""

    def __init__(self, server: str, argument: str) -> None:
        self.server = server
        self.argument = argument

    def __call__(self, args: BaseModel) -> str | None:
        value = getattr(args, self.argument, None)
        return None if value is None else f"mcp:{self.server}:{value}"
