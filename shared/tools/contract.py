"""The tool contract: what a tool declares (README: Build your own agent).

A tool is plain data plus hooks: a frozen `Tool` built with its constructor.  The model sees
only ``name``, ``description`` and the JSON schema of the argument model; everything that
decides whether a call may run (``authorize``, ``preconditions``, ``approval``) is code here,
never text in the description.  Hooks take the *validated* argument model, so a tool never
sees raw model output.

Error contract for ``execute``: raise `callgate.errors.ToolError` for a definitive failure the
model should be told (e.g. "no such train").  Any other exception (``aiohttp.ClientError``,
``TimeoutError``, or a bug such as ``RuntimeError``) means the outcome is not known to the tool;
the executor decides by effect: a read fails with an explicit result the model is told
("unavailable"/"timeout" for a lost answer, ``tool_error`` with the redacted exception for
anything else), any write becomes ``unknown`` (the exception kept as the call's reason) and
goes to the reconciler (``reconcile``, or for an idempotent write without one, the same request
under the same operation id).  The executor, not the tool, enforces ``timeout_s``.  An
exception from ``preconditions`` refuses the call (``precondition_failed``).
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar

import aiohttp
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from callgate.records import CallRecord, Effect, RunRecord
from callgate.tools.canonical import canonical_bytes
from callgate.tools.schema import to_tool_schema

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "IDEMPOTENCY_KEY_HEADER",
    "Effect",
    "Identity",
    "IsoDate",
    "Reconciliation",
    "Tool",
    "ToolContext",
    "ToolSpec",
    "call_context",
    "context_of",
]

DEFAULT_TIMEOUT_S = 2.0
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
"""The HTTP header a write's operation id travels in (IETF httpapi idempotency-key draft)."""
REDACTED = "[redacted]"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""The strictest of the three providers' function-name rules (OpenAI's)."""

A = TypeVar("A", bound=BaseModel)


def _real_date(value: str) -> str:
    dt.date.fromisoformat(value)  # ValueError -> a field error naming the bad date
    return value


IsoDate = Annotated[
    str,
    Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", json_schema_extra={"format": "date"}),
    AfterValidator(_real_date),
]
"""A calendar date as ``YYYY-MM-DD`` text.  Not `datetime.date`: pydantic would also take
digit strings as Unix timestamps, and the model must be held to one spelling."""


class Identity(BaseModel):
    """Who a run acts for; set by whoever enqueued the run, never by the model.  Fields
    besides user and roles (a tenant, say) are allowed only as the submitter's trust entry
    lists them (``attributes``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    user: str = Field(min_length=1, max_length=256)
    """The principal whose scope every call is checked against."""
    roles: list[str] = Field(default_factory=list)
    """Roles the principal holds (e.g. approver roles, admin scopes)."""


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The authoritative system's answer to "did operation X happen?"."""

    found: Literal["applied", "not_applied", "unknown"]
    result: dict[str, Any] | None = None
    """The effect's result when ``found == "applied"`` (what the model is told)."""


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a hook may use besides its arguments; built per call by the validator/executor."""

    run_id: str
    call_id: str
    turn: int
    identity: Identity
    session: aiohttp.ClientSession
    """Owned by the executor (or validator), shared by every call it runs; never closed here."""
    attempt: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    """Service URLs and other tool settings; `setting` falls back to the environment."""

    def idempotency_headers(self, operation_id: str) -> dict[str, str]:
        """``{"Idempotency-Key": operation_id}`` for an HTTP request that carries a write's
        effect (none for an empty id): a service that honours the header does the same
        operation once however often callgate has to send it."""
        return {IDEMPOTENCY_KEY_HEADER: operation_id} if operation_id else {}

    def setting(self, name: str, default: str) -> str:
        """A setting such as ``CALLGATE_TRAVEL_URL``: config, then environment, then default."""
        return self.config.get(name) or os.environ.get(name) or default


def call_context(
    run: RunRecord, call: CallRecord, session: aiohttp.ClientSession, attempt: int = 1
) -> ToolContext:
    """The context a worker hands a tool's hooks for one call of one run."""
    return context_of(run.run_id, call.call_id, call.turn, run.identity, session, attempt)


def context_of(
    run_id: str,
    call_id: str,
    turn: int,
    identity: Mapping[str, Any],
    session: aiohttp.ClientSession,
    attempt: int = 1,
) -> ToolContext:
    """`call_context` from plain values, e.g. an exec message's read order."""
    return ToolContext(
        run_id=run_id,
        call_id=call_id,
        turn=turn,
        identity=Identity.model_validate(identity),
        session=session,
        attempt=attempt,
    )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a provider adapter sends the model for one tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    """A self-contained object schema: no ``$ref``/``$defs``, ``additionalProperties: false``."""


Execute = Callable[[ToolContext, A, str], Awaitable[dict[str, Any]]]
Reconcile = Callable[[ToolContext, A, str], Awaitable[Reconciliation]]


def _no_resource(args: BaseModel) -> str | None:
    return None


def _allow_all(identity: Identity, args: BaseModel) -> str | None:
    return None


async def _no_preconditions(ctx: ToolContext, args: BaseModel) -> str | None:
    return None


def _no_approval(identity: Identity, args: BaseModel) -> str | None:
    return None


@dataclass(frozen=True, kw_only=True)
class Tool(Generic[A]):
    """One tool.  Hooks receive the validated argument model ``A``.

    ``authorize`` returns None when allowed, else the reason (shown to the model);
    ``preconditions`` likewise, asynchronously; ``approval`` returns the approver role a
    human must hold, or None; ``resource_key`` orders writes on one resource.
    """

    name: str
    version: str
    description: str
    args_model: type[A]
    effect: Effect
    execute: Execute[A]
    reconcile: Reconcile[A] | None = None
    resource_key: Callable[[A], str | None] = _no_resource
    authorize: Callable[[Identity, A], str | None] = _allow_all
    preconditions: Callable[[ToolContext, A], Awaitable[str | None]] = _no_preconditions
    approval: Callable[[Identity, A], str | None] = _no_approval
    timeout_s: float = DEFAULT_TIMEOUT_S
    sensitive_fields: frozenset[str] = frozenset()
    """Argument/result field names never written to logs or events."""
    origin: str = "local"
    """Where the tool and its effect come from: ``local``, or an MCP server's tool with the
    effect it was given and why (annotation, default, untrusted server)."""
    effect_source: str = "declared"
    """Where ``effect`` came from and why, recorded on every call: ``declared`` (a tool
    module), or for an MCP tool ``annotation: …``, ``default: …`` or ``override: …``."""
    _schema: dict[str, Any] = field(init=False, repr=False, compare=False)
    _spec: ToolSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Fail at import time, not on the first call, when a declaration is wrong.
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME.pattern}")
        if not self.version or not self.description.strip():
            raise ValueError(f"tool {self.name!r}: version and description are required")
        if self.args_model.model_config.get("extra") != "forbid":
            raise ValueError(f"tool {self.name!r}: argument model must set extra='forbid'")
        if self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be positive")
        if self.effect is Effect.WRITE and self.reconcile is None:
            raise ValueError(f"tool {self.name!r}: a write must define reconcile")
        object.__setattr__(self, "_schema", to_tool_schema(self.args_model))
        object.__setattr__(self, "_spec", ToolSpec(self.name, self.description, self.json_schema()))

    def json_schema(self) -> dict[str, Any]:
        """The argument schema the model sees (a fresh copy; safe to mutate)."""
        return copy.deepcopy(self._schema)

    def spec(self) -> ToolSpec:
        """The same spec every turn (adapters only read it): a deep copy per turn cost
        model_turn 3.5% of its CPU in the throughput benchmark."""
        return self._spec

    def validate(self, arguments: Mapping[str, Any] | str | bytes) -> A:
        """Parse arguments strictly in JSON mode (the mode the model's text arrives in).

        Also used by the executor to rebuild the model from the ledger's canonical
        arguments, so validator and executor accept exactly the same values.
        Raises `pydantic.ValidationError`.
        """
        data = arguments if isinstance(arguments, str | bytes) else canonical_bytes(arguments)
        return self.args_model.model_validate_json(data, strict=True)

    @staticmethod
    def dump(args: BaseModel) -> dict[str, Any]:
        """The JSON-able arguments as validated (what is canonicalized and hashed)."""
        return args.model_dump(mode="json")

    @property
    def is_write(self) -> bool:
        return self.effect is not Effect.READ

    @property
    def has_preconditions(self) -> bool:
        """Whether checking a call needs this tool's own (possibly I/O) precondition hook."""
        return self.preconditions is not _no_preconditions

    def resource_of(self, args: A) -> str | None:
        """The resource this call's effect orders on: None for reads, never None for writes."""
        if not self.is_write:
            return None
        return self.resource_key(args) or f"tool:{self.name}"

    def redact(self, data: Any) -> Any:
        """``data`` with every ``sensitive_fields`` key, at any depth, replaced by a marker."""
        if not self.sensitive_fields:
            return data
        return _redact(data, self.sensitive_fields)


def _redact(data: Any, fields: frozenset[str]) -> Any:
    if isinstance(data, Mapping):
        return {k: REDACTED if k in fields else _redact(v, fields) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_redact(v, fields) for v in data]
    return data
