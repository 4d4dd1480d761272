"""The deployment's MCP servers and the effect of each of their tools (README: Tools from MCP
servers; DESIGN §12).

``CALLGATE_MCP_SERVERS`` lists them, as the deployment's tool modules are listed: a run selects
their tools by name and can never name a server.  Per the MCP specification a tool's
annotations are hints, to be trusted only when the server is; the spec's defaults
(``readOnlyHint=false``, ``destructiveHint=true``, ``idempotentHint=false``) make the decision
fail closed:

* a trusted server's ``readOnlyHint: true`` → ``read``;
* a trusted server's ``idempotentHint: true`` → ``idempotent_write`` (the operation id travels
  in the call's ``_meta``, so the server can honour it);
* anything else — a missing hint, a destructive tool, any tool of an untrusted server — →
  ``write``.

The deployment's own word beats the server's: ``tools`` holds a local policy per tool (the
server's name for it) — its effect, the approver role every call needs, the argument that
orders its writes, its sensitive fields, an authorization function and the lookup it
reconciles through (a tool on the same server, or a ``module:function`` of the deployment).
Functions are named only here, in the deployment's server list, and imported by the worker at
start; a run or a message can never name one.  A write without a lookup leaves a lost answer
unknown and the run waits for a person.  Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from callgate.records import Effect

__all__ = ["EffectChoice", "McpServer", "McpToolPolicy", "choose_effect", "parse_servers"]

OPERATION_META_KEY = "callgate/operation_id"
"""Where a write's operation id travels in ``tools/call``'s ``params._meta``."""
FUNCTION_REF = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
"""``module:function``: a hook the deployment's own code provides."""
_TOOL_OR_FUNCTION = r"^([A-Za-z0-9_-]{1,64}|[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*)$"


class McpToolPolicy(BaseModel):
    """The deployment's local policy for one of a server's tools; it beats the annotations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    effect: Effect | None = None
    """The effect to use whatever the server says; None = from the annotations."""
    approval: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """The approver role a person must hold before any call of the tool runs."""
    resource_key: str | None = Field(default=None, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    """The argument whose value orders the tool's writes (with every tool of the server)."""
    sensitive: tuple[str, ...] = ()
    """Argument and result fields never written to logs or events."""
    authorize: str | None = Field(default=None, pattern=FUNCTION_REF)
    """``module:function`` taking (identity, arguments) → None to allow, else the reason."""
    lookup: str | None = Field(default=None, pattern=_TOOL_OR_FUNCTION)
    """How a write is reconciled: a lookup tool on the same server, asked
    ``{"operation_id": ...}``, or an async ``module:function`` with the signature of
    `Tool.reconcile`."""


class McpServer(BaseModel):
    """One entry of ``CALLGATE_MCP_SERVERS``: where the server is and how far it is trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    """The deployment's name for the server (logs, the default prefix)."""
    url: str | None = None
    """A Streamable HTTP endpoint, e.g. ``http://127.0.0.1:8000/mcp``."""
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    """Or a stdio server: the argv each worker process starts it with."""
    trusted: bool = False
    """Whether its annotations are believed; untrusted, every tool is a ``write``."""
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{0,32}$")
    """Put before each tool name; None = ``NAME__``, ``""`` keeps the server's names."""
    tools: dict[str, McpToolPolicy] = Field(default_factory=dict)
    """The server's tool name → the deployment's local policy for it."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Each call's timeout; None = the deployment's ``tool_timeout_s``."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url (Streamable HTTP) or command (stdio)")
        return self

    @property
    def tool_prefix(self) -> str:
        return f"{self.name}__" if self.prefix is None else self.prefix


def parse_servers(entries: tuple[Mapping[str, Any], ...]) -> tuple[McpServer, ...]:
    """The validated entries; a wrong entry raises `ValueError` naming it."""
    servers = []
    for index, entry in enumerate(entries):
        try:
            servers.append(McpServer.model_validate(entry))
        except ValidationError as exc:
            raise ValueError(f"CALLGATE_MCP_SERVERS[{index}]: {exc}") from exc
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ValueError(f"CALLGATE_MCP_SERVERS: server names repeat: {names}")
    return tuple(servers)


EffectSource = Literal["annotation", "default", "override"]


@dataclass(frozen=True, slots=True)
class EffectChoice:
    """The effect a tool from an MCP server gets, where it came from and why (shown by the
    registry, recorded on every call and in the run's event log)."""

    effect: Effect
    reason: str
    source: EffectSource = "default"

    def describe(self) -> str:
        return f"{self.source}: {self.reason}"


def choose_effect(
    annotations: Mapping[str, Any] | None, trusted: bool, override: Effect | None = None
) -> EffectChoice:
    """The fail-closed effect of a tool with ``annotations`` (camelCase, as on the wire),
    unless the deployment's ``override`` says otherwise."""
    if override is not None:
        return EffectChoice(override, "the deployment's policy for the tool", "override")
    hints = annotations or {}
    if not trusted:
        return EffectChoice(Effect.WRITE, "untrusted server, annotations ignored")
    if hints.get("readOnlyHint") is True:
        return EffectChoice(Effect.READ, "readOnlyHint", "annotation")
    if hints.get("idempotentHint") is True:
        return EffectChoice(Effect.IDEMPOTENT_WRITE, "idempotentHint", "annotation")
    if not hints:
        return EffectChoice(Effect.WRITE, "no annotations")
    return EffectChoice(Effect.WRITE, "not read-only, not idempotent")
