"""Stream messages: one frozen pydantic model per kind, one orjson codec.

Every envelope carries a schema version, its own message id, the ``run_id`` and ``turn``
it belongs to and, for per-call messages, the ``call_id``.  Validation is strict and
extra fields are forbidden; anything that does not decode raises `EnvelopeError`, which
the stream loop turns into a dead letter with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from callgate.errors import EnvelopeError

if TYPE_CHECKING:
    from callgate.records import CallRecord, RunRecord

SCHEMA_VERSION = 1


def new_id() -> str:
    """A random 64-bit id in hex: unique enough per run, short in Redis."""
    return os.urandom(8).hex()


class _Envelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1] = 1
    """Schema version; a reader rejects versions it does not know."""
    msg_id: str = Field(default_factory=new_id, min_length=1, max_length=64)
    """Unique id of this message, for tracing and dedup."""
    run_id: str = Field(min_length=1, max_length=128)
    """The run this message belongs to; also selects the partition."""
    turn: int = Field(ge=0)
    """The model turn this message belongs to (1-based; 0 before the first turn)."""


class _CallEnvelope(_Envelope):
    call_id: str = Field(min_length=1, max_length=128)
    """callgate's own id of the call (never the provider's, which the model controls)."""


class TurnRequest(_Envelope):
    """Ask the model_turn worker to run turn ``turn`` of the run."""

    kind: Literal["turn_request"] = "turn_request"
    reason: str = "next"
    """Why the turn was requested: start, next, retry, resume, fix_answer."""


class ProposedOrder(BaseModel):
    """One call as model_turn recorded it: what the validator decides on."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    call_id: str = Field(min_length=1, max_length=128)
    index: int = Field(ge=0)
    tool: str
    raw_arguments: str


class DecideOrder(BaseModel):
    """A turn's calls and the run's authority, written in the same step as the call records:
    all the validator decides from, so it need not read the ledger first.  Its step is
    guarded on these very values in the ledger, so an order that does not match them (stale
    or forged) writes nothing and the validator decides from the ledger instead."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    identity: dict[str, Any]
    tool_modules: tuple[str, ...]
    allowed_tools: tuple[str, ...] | None
    batch_policy: Literal["hold_effects", "run_allowed"]
    approval_ttl_s: float | None
    calls: tuple[ProposedOrder, ...] = Field(min_length=1)


def decide_order(run: RunRecord, calls: Sequence[CallRecord]) -> DecideOrder:
    """The `DecideOrder` of ``calls`` of ``run``, as the ledger holds them."""
    return DecideOrder(
        identity=run.identity,
        tool_modules=tuple(run.tool_modules),
        allowed_tools=None if run.allowed_tools is None else tuple(run.allowed_tools),
        batch_policy=run.batch_policy,
        approval_ttl_s=run.approval_ttl_s,
        calls=tuple(
            ProposedOrder(
                call_id=c.call_id, index=c.index, tool=c.tool, raw_arguments=c.raw_arguments
            )
            for c in calls
        ),
    )


class ValidateRequest(_Envelope):
    """Ask the validator to decide every call the model requested in ``turn``."""

    kind: Literal["validate_request"] = "validate_request"
    call_ids: tuple[str, ...] = Field(min_length=1)
    """The turn's calls, in provider order."""
    order: DecideOrder | None = None
    """What model_turn recorded (`DecideOrder`); without it the validator reads the ledger."""


class ReadOrder(BaseModel):
    """An allowed read as the validator decided it, written in the same step as the decision:
    all an executor needs to run it without reading the ledger first (its outcome step is
    still guarded on the call being ``allowed``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    tool: str = Field(min_length=1, max_length=128)
    tool_version: str = Field(min_length=1, max_length=64)
    tool_modules: tuple[str, ...]
    arguments: dict[str, Any]
    identity: dict[str, Any]


class ExecRequest(_CallEnvelope):
    """Ask an executor to run one allowed or approved call."""

    kind: Literal["exec_request"] = "exec_request"
    chain: tuple[str, ...] = ()
    """Calls on the same resource to run after this one, in order, once it is terminal."""
    read: ReadOrder | None = None
    """Set for an allowed read (`ReadOrder`); writes and approved calls are read from the
    ledger, where their take and approval binding are checked."""


class CallResult(_CallEnvelope):
    """A call reached a state the loop waits for."""

    kind: Literal["call_result"] = "call_result"
    state: str
    """The call's state when the message was written (succeeded, failed, rejected, …)."""
    result: dict[str, Any] | None = None
    """The result recorded in the same step, when its writer had it at hand: model_turn may
    then append a turn's results without reading its calls back, in a step guarded on the
    ledger holding these very states and results.  None: read the ledger."""


class ReconcileRequest(_CallEnvelope):
    """Ask the reconciler whether a write with an unknown outcome took effect."""

    kind: Literal["reconcile_request"] = "reconcile_request"
    attempt: int = Field(default=1, ge=1)
    """Which check of the back-off schedule this is."""
    chain: tuple[str, ...] = ()
    """Calls on the same resource waiting for this one to be resolved."""


class ApprovalDecision(_CallEnvelope):
    """A human's decision on a pending approval, posted by the Slack bot or the CLI."""

    kind: Literal["approval_decision"] = "approval_decision"
    approval_id: str = Field(min_length=1, max_length=128)
    decision: Literal["approve", "deny"]
    approver: str = Field(min_length=1, max_length=256)
    """The verified identity of whoever decided (Slack user id or CLI user)."""
    args_hash: str = Field(min_length=1, max_length=128)
    """Hash of the canonical arguments the approver saw; must match the pending record."""
    reason: str | None = Field(default=None, max_length=2000)
    source: Literal["slack", "cli", "api"] = "cli"


class ApprovalExpired(_CallEnvelope):
    """A pending approval's expiry time came (posted by the arq deferred job)."""

    kind: Literal["approval_expired"] = "approval_expired"
    approval_id: str = Field(min_length=1, max_length=128)


Envelope = Annotated[
    TurnRequest
    | ValidateRequest
    | ExecRequest
    | CallResult
    | ReconcileRequest
    | ApprovalDecision
    | ApprovalExpired,
    Field(discriminator="kind"),
]
"""Any stream message; dispatch on ``.kind`` with `typing.assert_never` in the default."""

_adapter: TypeAdapter[Envelope] = TypeAdapter(Envelope)


def encode(message: _Envelope) -> bytes:
    return orjson.dumps(message.model_dump(mode="json"))


def decode(data: bytes | str) -> Envelope:
    """Parse and strictly validate one message, or raise `EnvelopeError` with the reason.

    JSON-mode validation: strict about types, yet a JSON array may fill a tuple field.
    """
    try:
        return _adapter.validate_json(data)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise EnvelopeError(f"not JSON: {exc.errors()[0]['msg']}") from exc
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise EnvelopeError(f"invalid envelope: {errors}") from exc
