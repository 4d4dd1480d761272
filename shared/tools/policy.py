"""Per-call validation outside the model (README: Security), a pure function of a request.

`decide` runs the checks in a fixed order and stops at the first failure, so every
rejection has exactly one code:

    unknown_tool → tool_not_allowed → arguments_too_large → arguments_too_deep →
    invalid_json → invalid_arguments → not_authorized → needs_approval | allowed

The size check runs on the raw text before any parsing, and the depth check is a linear
scan of the raw text *before* the parser (not after it): orjson refuses documents deeper
than 1024 and recursive walkers blow the stack, so depth must be known without either.
Preconditions may do I/O and are a separate async step, `check_preconditions`.

Every error is ``{"code", "message"}`` built only from what the model itself sent plus
the run's own allow-list, so it is safe to hand back to the model.  A rejected `Decision`
carries no `Tool` (``decision.tool is None``): there is nothing to execute.  Exceptions
raised by a tool's own synchronous hooks are bugs and propagate to the worker; one raised by
its preconditions is a failed precondition (`check_preconditions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

from callgate.config import Settings
from callgate.errors import ToolError
from callgate.records import ErrorDetail
from callgate.redact import redact_error, sensitive_values
from callgate.tools.canonical import canonical_json, hash_bytes
from callgate.tools.contract import Identity, Tool, ToolContext
from callgate.tools.json_guard import duplicate_key, exceeds_depth
from callgate.tools.registry import ToolRegistry

__all__ = [
    "Decision",
    "ErrorDetail",
    "Identity",
    "Limits",
    "Outcome",
    "ProposedCall",
    "Rejection",
    "check_preconditions",
    "decide",
    "decide_batch",
]

Outcome = Literal["allowed", "rejected", "needs_approval"]
_MAX_FIELD_ERRORS = 10


class Rejection(StrEnum):
    """Every code a rejected call can carry."""

    UNKNOWN_TOOL = "unknown_tool"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    ARGUMENTS_TOO_LARGE = "arguments_too_large"
    ARGUMENTS_TOO_DEEP = "arguments_too_deep"
    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_AUTHORIZED = "not_authorized"
    PRECONDITION_FAILED = "precondition_failed"
    DUPLICATE_CALL_ID = "duplicate_call_id"
    TOO_MANY_CALLS = "too_many_calls"


@dataclass(frozen=True, slots=True)
class Limits:
    """What the model may send per call and per turn."""

    max_argument_bytes: int = 16_384
    max_argument_depth: int = 8
    max_calls_per_turn: int = 16

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            max_argument_bytes=settings.max_argument_bytes,
            max_argument_depth=settings.max_argument_depth,
            max_calls_per_turn=settings.max_calls_per_turn,
        )


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """One tool request of a turn, as the provider adapter normalized it."""

    call_id: str
    name: str
    raw_arguments: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The validator's verdict on one call; what the ledger records as the policy decision."""

    outcome: Outcome
    tool_name: str
    """The name the model asked for (possibly unknown)."""
    tool: Tool[Any] | None
    """The tool to run after approval or now; always None when rejected."""
    tool_version: str | None = None
    arguments: dict[str, Any] | None = None
    """The validated arguments (JSON-able); set once the schema check passed."""
    canonical_arguments: str | None = None
    """Sorted-key compact JSON of ``arguments``: what is stored and approved."""
    args_hash: str | None = None
    error: ErrorDetail | None = None
    approver_role: str | None = None
    call_id: str | None = None
    """Set by `decide_batch`."""

    @property
    def executable(self) -> bool:
        """True only for a call that may run now, without a human."""
        return self.outcome == "allowed"

    def reject(self, error: ErrorDetail) -> Decision:
        """This decision turned into a rejection (e.g. after a failed precondition)."""
        return dataclasses.replace(
            self, outcome="rejected", tool=None, error=error, approver_role=None
        )


def _error(code: Rejection, message: str) -> ErrorDetail:
    return ErrorDetail(code=code.value, message=message)


def _quote(text: str, limit: int = 64) -> str:
    """A model-supplied string, shortened, for an error message."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _rejected(name: str, code: Rejection, message: str, tool: Tool[Any] | None = None) -> Decision:
    return Decision(
        outcome="rejected",
        tool_name=name,
        tool=None,
        tool_version=tool.version if tool else None,
        error=_error(code, message),
    )


def _check_raw(raw: str, limits: Limits) -> ErrorDetail | None:
    """Size, depth and JSON-object checks on the raw text, cheapest first."""
    # len(str) <= len(utf-8 bytes): a string too long in characters is too long in bytes,
    # and is rejected without even encoding it.
    size = len(raw)
    if size <= limits.max_argument_bytes:
        size = len(raw.encode("utf-8", "surrogatepass"))
    if size > limits.max_argument_bytes:
        return _error(
            Rejection.ARGUMENTS_TOO_LARGE,
            f"arguments are {size} bytes; the limit is {limits.max_argument_bytes}",
        )
    if exceeds_depth(raw, limits.max_argument_depth):
        return _error(
            Rejection.ARGUMENTS_TOO_DEEP,
            f"arguments nest deeper than {limits.max_argument_depth} levels",
        )
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _error(Rejection.INVALID_JSON, f"arguments are not valid JSON: {exc}")
    if not isinstance(parsed, dict):
        return _error(
            Rejection.INVALID_JSON, f"arguments must be a JSON object, not {type(parsed).__name__}"
        )
    duplicate = duplicate_key(raw, parsed)
    if duplicate is not None:
        return _error(Rejection.INVALID_JSON, f"duplicate key {_quote(duplicate)} in arguments")
    return None


def _field_errors(exc: ValidationError) -> str:
    """Field-level messages without the offending values (they may be sensitive)."""
    parts = [
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
        for e in exc.errors(include_url=False, include_input=False)[:_MAX_FIELD_ERRORS]
    ]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _as_identity(identity: Identity | Mapping[str, Any]) -> Identity | None:
    if isinstance(identity, Identity):
        return identity
    try:
        return Identity.model_validate(identity)
    except ValidationError:
        return None


def decide(
    registry: ToolRegistry,
    *,
    allowed_tools: Collection[str],
    identity: Identity | Mapping[str, Any],
    name: str,
    raw_arguments: str,
    limits: Limits,
) -> Decision:
    """Decide one call.  Pure: no I/O, no clock; the same inputs give the same decision.

    An empty ``raw_arguments`` means ``{}`` (some providers send "" for a call without
    arguments); the schema still decides whether ``{}`` is acceptable.
    """
    tool = registry.get(name)
    if tool is None:
        offered = ", ".join(sorted(n for n in allowed_tools if n in registry)) or "none"
        return _rejected(
            name, Rejection.UNKNOWN_TOOL, f"unknown tool {_quote(name)}; available: {offered}"
        )
    if name not in allowed_tools:
        return _rejected(
            name, Rejection.TOOL_NOT_ALLOWED, f"tool {name!r} is not allowed in this run", tool
        )
    raw = raw_arguments if raw_arguments.strip() else "{}"
    problem = _check_raw(raw, limits)
    if problem is not None:
        return Decision("rejected", name, None, tool.version, error=problem)
    try:
        args = tool.validate(raw)
    except ValidationError as exc:
        message = f"invalid arguments for {name}: {_field_errors(exc)}"
        return _rejected(name, Rejection.INVALID_ARGUMENTS, message, tool)
    return _authorize(tool, args, identity)


def _authorize(
    tool: Tool[Any], args: BaseModel, identity: Identity | Mapping[str, Any]
) -> Decision:
    """The identity/scope and approval steps, on arguments that passed the schema."""
    arguments = tool.dump(args)
    try:
        canonical = canonical_json(arguments)
    except TypeError:  # e.g. an integer beyond 64 bits, which orjson cannot represent
        message = f"invalid arguments for {tool.name}: a value is out of range (64-bit numbers)"
        return _rejected(tool.name, Rejection.INVALID_ARGUMENTS, message, tool)
    base = Decision(
        "allowed",
        tool.name,
        tool,
        tool.version,
        arguments=arguments,
        canonical_arguments=canonical,
        args_hash=hash_bytes(canonical.encode()),
    )
    who = _as_identity(identity)
    if who is None:
        return base.reject(_error(Rejection.NOT_AUTHORIZED, "the run's identity is invalid"))
    reason = tool.authorize(who, args)
    if reason is not None:
        return base.reject(_error(Rejection.NOT_AUTHORIZED, reason))
    role = tool.approval(who, args)
    if role is not None:
        return dataclasses.replace(base, outcome="needs_approval", approver_role=role)
    return base


def decide_batch(
    registry: ToolRegistry,
    *,
    allowed_tools: Collection[str],
    identity: Identity | Mapping[str, Any],
    calls: Sequence[ProposedCall],
    limits: Limits,
) -> list[Decision]:
    """One decision per call, in the calls' order, each tagged with its ``call_id``.

    A repeated call id is rejected (the first occurrence is decided normally; results pair
    by id, so a second call under the same id could never be answered unambiguously).
    Calls past ``max_calls_per_turn`` are rejected with ``too_many_calls``, never dropped.
    """
    who = _as_identity(identity)
    seen: set[str] = set()
    decisions: list[Decision] = []
    for index, call in enumerate(calls):
        tool = registry.get(call.name)
        if call.call_id in seen:
            decision = _rejected(
                call.name,
                Rejection.DUPLICATE_CALL_ID,
                f"call id {_quote(call.call_id)} appears more than once in this turn",
                tool,
            )
        elif index >= limits.max_calls_per_turn:
            decision = _rejected(
                call.name,
                Rejection.TOO_MANY_CALLS,
                f"at most {limits.max_calls_per_turn} tool calls per turn; this is call"
                f" {index + 1}",
                tool,
            )
        else:
            decision = decide(
                registry,
                allowed_tools=allowed_tools,
                identity=who if who is not None else identity,
                name=call.name,
                raw_arguments=call.raw_arguments,
                limits=limits,
            )
        seen.add(call.call_id)
        decisions.append(dataclasses.replace(decision, call_id=call.call_id))
    return decisions


async def check_preconditions(
    tool: Tool[Any], ctx: ToolContext, arguments: Mapping[str, Any] | BaseModel
) -> ErrorDetail | None:
    """Run the tool's business preconditions; None when they hold.

    A `ToolError` from the hook counts as a failed precondition, and so does any other
    exception (the precondition could not be checked): the call is refused with the redacted
    exception, and the model told, rather than the batch redelivered until it is dead-lettered
    and the whole run fails.  A cancellation (``BaseException``) still propagates.
    """
    args = arguments if isinstance(arguments, BaseModel) else tool.validate(arguments)
    try:
        reason = await tool.preconditions(ctx, args)
    except ToolError as exc:
        reason = exc.message
    except Exception as exc:  # the tool's own code; what it raised is the reason
        echoed = sensitive_values(tool.dump(args), tool.sensitive_fields)
        reason = f"the precondition could not be checked: {redact_error(exc, echoed)}"
    return None if reason is None else _error(Rejection.PRECONDITION_FAILED, reason)
