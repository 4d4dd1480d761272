"""Stream messages: one frozen pydantic model per kind, one orjson codec.

Every envelope carries a schema version, its own message id, the ``run_id`` and ``turn``
it belongs to and, for per-call messages, the ``call_id``.  Validation is strict, extra
fields are forbidden and every number is bounded (anyone allowed to XADD a stream chooses
them); anything that does not decode raises `EnvelopeError`, which the stream loop turns
into a dead letter with the reason.  Each stream carries only its own kinds (`CARRIED_ON`):
the loop dead-letters any other kind, so no handler sees a message off its stream.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from callgate.errors import EnvelopeError, NewerSchemaError
from callgate.facts import CALLS_MAX, DecideFacts, ExecFacts
from callgate.records import LEDGER_SCHEMA, CallOutcome
from callgate.telemetry.ids import TRACEPARENT_PATTERN

SCHEMA_VERSION = LEDGER_SCHEMA
TURN_MAX = 1_000_000
"""Far above any run's turns (a spec allows 1,000; follow-ups add one each)."""
ATTEMPT_MAX = 1_000
EPOCH_MS_MAX = 2**53
"""The largest time in ms a JSON number holds exactly (the year 285,000)."""


_random_bytes: Callable[[int], bytes] = os.urandom


def new_id() -> str:
    """A random 64-bit id in hex: unique enough per run, short in Redis."""
    return _random_bytes(8).hex()


def use_id_source(source: Callable[[int], bytes] | None) -> None:
    """Draw ids from ``source`` (None: the OS's randomness again): the schedule explorer's
    replays must make the same ids, since the order of some indices follows them."""
    global _random_bytes
    _random_bytes = source or os.urandom


class EnvelopeBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1] = 1
    """The ledger schema (`LEDGER_SCHEMA`); a newer one is refused (`decode`), failing nothing."""
    msg_id: str = Field(default_factory=new_id, min_length=1, max_length=64)
    """Unique id of this message, for tracing and dedup."""
    run_id: str = Field(min_length=1, max_length=128)
    """The run this message belongs to; also selects the partition."""
    turn: int = Field(ge=0, le=TURN_MAX)
    """The model turn this message belongs to (1-based; 0 before the first turn)."""
    traceparent: str | None = Field(default=None, pattern=TRACEPARENT_PATTERN, exclude=True)
    """W3C trace context of the run's trace, written only while tracing is on (`stamp_with`):
    the reader's span joins it.  Trace data only: nothing is decided on it, and it is left
    out of every dump but `encode`'s (an event made of a message does not show it)."""


class CallEnvelopeBase(EnvelopeBase):
    call_id: str = Field(min_length=1, max_length=128)
    """callgate's own id of the call (never the provider's, which the model controls)."""


class TurnRequest(EnvelopeBase):
    """Ask the model_turn worker to run turn ``turn`` of the run."""

    kind: Literal["turn_request"] = "turn_request"
    reason: str = "next"
    """Why the turn was requested: start, next, retry, resume, fix_answer."""


class ValidateRequest(EnvelopeBase):
    """Ask the validator to decide every call the model requested in ``turn``."""

    kind: Literal["validate_request"] = "validate_request"
    call_ids: tuple[Annotated[str, Field(min_length=1, max_length=128)], ...] = Field(
        min_length=1, max_length=CALLS_MAX
    )
    """The turn's calls, in provider order."""
    facts: DecideFacts | None = None
    """What model_turn recorded, when it carries it (`callgate.facts`)."""


class ExecRequest(CallEnvelopeBase):
    """Ask an executor to run one allowed or approved call."""

    kind: Literal["exec_request"] = "exec_request"
    chain: tuple[Annotated[str, Field(max_length=128)], ...] = Field((), max_length=CALLS_MAX)
    """Calls on the same resource to run after this one, in order, once it is terminal."""
    facts: ExecFacts | None = None
    """The call as the validator decided it, when carried (`callgate.facts`)."""


class CallResult(CallEnvelopeBase):
    """A call reached a state the loop waits for."""

    kind: Literal["call_result"] = "call_result"
    state: str
    """The call's state when the message was written (succeeded, failed, rejected, …)."""
    result: CallOutcome | None = None
    """The result recorded in the same step, when carried: model_turn may then append a
    turn's results without reading its calls back (`callgate.facts.SettledCall`)."""


class ReconcileRequest(CallEnvelopeBase):
    """Ask the reconciler whether a write with an unknown outcome took effect."""

    kind: Literal["reconcile_request"] = "reconcile_request"
    attempt: int = Field(default=1, ge=1, le=ATTEMPT_MAX)
    """Which check of the back-off schedule this is."""
    chain: tuple[Annotated[str, Field(max_length=128)], ...] = Field((), max_length=CALLS_MAX)
    """Calls on the same resource waiting for this one to be resolved."""


class SignedDecision(EnvelopeBase):
    """A person's signed decision (approve, deny, …), posted by the CLI, the Slack bot or the
    HTTP API.  Only the token counts: which call, what was decided and by whom are its signed
    claims (`callgate.decisions.claims`), verified against the deployment's keys."""

    kind: Literal["decision"] = "decision"
    token: str = Field(min_length=1, max_length=16_384)


class ApprovalRequested(CallEnvelopeBase):
    """Notify: a call waits for a human's approval (posted by the validator's step)."""

    kind: Literal["approval_requested"] = "approval_requested"
    approval_id: str = Field(min_length=1, max_length=128)
    tool: str
    args_hash: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any]
    """The canonical arguments with every field the tool marks sensitive redacted."""
    approver_role: str
    requested_by: str
    expires_ms: int = Field(ge=0, le=EPOCH_MS_MAX)


class OutcomeUnknown(CallEnvelopeBase):
    """Notify: a write's outcome stayed unknown after every check; a person must resolve it."""

    kind: Literal["outcome_unknown"] = "outcome_unknown"
    tool: str
    operation_id: str | None
    detail: str


class ApprovalExpired(CallEnvelopeBase):
    """A pending approval's expiry time came (posted by the arq deferred job)."""

    kind: Literal["approval_expired"] = "approval_expired"
    approval_id: str = Field(min_length=1, max_length=128)


Envelope = Annotated[
    TurnRequest
    | ValidateRequest
    | ExecRequest
    | CallResult
    | ReconcileRequest
    | SignedDecision
    | ApprovalExpired
    | ApprovalRequested
    | OutcomeUnknown,
    Field(discriminator="kind"),
]
"""Any stream message; dispatch on ``.kind`` with `typing.assert_never` in the default."""

CARRIED_ON: Mapping[str, tuple[type[EnvelopeBase], ...]] = MappingProxyType(
    {
        "turns": (TurnRequest,),
        "validate": (ValidateRequest,),
        "exec": (ExecRequest,),
        "results": (CallResult,),
        "reconcile": (ReconcileRequest,),
        "decisions": (SignedDecision, ApprovalExpired),
        "notify": (ApprovalRequested, OutcomeUnknown),
    }
)
"""The kinds each stream carries, and nothing else.  The stream loop dead-letters any other
kind before a handler sees it: the decisions stream, which approvers and the Slack bot may
write, never brings the validator a `ValidateRequest`."""


def home_stream(kind: type[EnvelopeBase]) -> str:
    """The one stream kind that carries ``kind`` (a worker's own work stream for it)."""
    return next(stream for stream, kinds in CARRIED_ON.items() if kind in kinds)


_adapter: TypeAdapter[Envelope] = TypeAdapter(Envelope)


_stamp: Callable[[str], str | None] | None = None


def stamp_with(stamp: Callable[[str], str | None] | None) -> None:
    """Give every message this process encodes the ``traceparent`` ``stamp(run_id)`` returns
    (`callgate.telemetry`; None: none again).  The ledger's steps build their outbox messages
    here, so the trace follows a run through every step without the steps knowing of it."""
    global _stamp
    _stamp = stamp


def encode(message: EnvelopeBase) -> bytes:
    data = message.model_dump(mode="json")
    traceparent = message.traceparent
    if traceparent is None and _stamp is not None:  # tracing off: the message is as it was
        traceparent = _stamp(message.run_id)
    if traceparent is not None:
        data["traceparent"] = traceparent
    return orjson.dumps(data)


def _refuse_newer(data: bytes | str) -> None:
    """Raise `NewerSchemaError` for a message of a newer schema (read only once it failed)."""
    message = orjson.loads(data)
    version = message.get("v") if isinstance(message, dict) else None
    if type(version) is int and version > SCHEMA_VERSION:
        raise NewerSchemaError(f"this {message.get('kind', 'message')}", version, SCHEMA_VERSION)


def decode(data: bytes | str) -> Envelope:
    """Parse and strictly validate one message, or raise `EnvelopeError` with the reason.

    JSON-mode validation: strict about types, yet a JSON array may fill a tuple field.
    """
    try:
        return _adapter.validate_json(data)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise EnvelopeError(f"not JSON: {exc.errors()[0]['msg']}") from exc
        _refuse_newer(data)
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise EnvelopeError(f"invalid envelope: {errors}") from exc
