"""The ledger's records and their mapping to and from one Redis hash each.

Pure: no I/O.  Each field is one hash field, so a compare-and-set can read ``status`` or
``state`` directly; how each is encoded is `callgate.hash_fields`'s (``None`` is an absent
field, so a partial update deletes it and absent reads back as None).

Unknown hash fields (written by a newer version) are ignored on read; updates are partial
HSETs, so an older reader never erases them.  Forward-compatible data belongs in ``extra``.
A record carries the ledger schema it was written under (field ``v``; none: 1, as 0.1 wrote
them); a reader refuses one newer than `LEDGER_SCHEMA` rather than misread it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from callgate.errors import NewerSchemaError
from callgate.hash_fields import HashValue, decode_value, encode_value, kinds_of
from callgate.states import CallState, RunState

LEDGER_SCHEMA = 1
"""The schema of every ledger record and stream message this version writes and reads.  A
change a worker of the previous version would misread raises it, for records and messages
alike (CHANGELOG says which release did); a worker refuses anything newer it meets
(`NewerSchemaError`): dead-lettered for a newer worker, failing nothing."""
SCHEMA_FIELD = "v"
RAW_ARGUMENTS_MAX_BYTES = 16_384
"""The model's raw argument text is kept for audit, cut to this many UTF-8 bytes."""

Api = Literal["openai-responses", "openai-chat", "anthropic-messages"]
BatchPolicy = Literal["hold_effects", "run_allowed"]
"""What runs while some calls of a batch wait for a human: ``hold_effects`` (default) runs
only reads until every call is decided; ``run_allowed`` also runs allowed writes at once."""


class Effect(StrEnum):
    """What running a tool does to the world; decides retry and reconciliation."""

    READ = "read"
    """No external effect: safe to redo after a crash or a lost answer."""
    IDEMPOTENT_WRITE = "idempotent_write"
    """An effect the downstream deduplicates by the operation id: retried with the same id."""
    WRITE = "write"
    """An effect that must never be repeated: a lost answer is reconciled, never replayed."""


class OkResult(BaseModel):
    """A call's result when the tool succeeded: what its system returned."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["ok"] = "ok"
    payload: Any
    """The tool's answer as JSON (what the model is told)."""


class ErrorDetail(BaseModel):
    """A structured error, safe to show the model: a stable code and a sentence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(min_length=1, max_length=128)
    message: str


class ErrorResult(BaseModel):
    """A call's result when it failed or was refused; the model sees ``error``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["error"] = "error"
    error: ErrorDetail


CallOutcome = Annotated[OkResult | ErrorResult, Field(discriminator="status")]
"""Every call that reaches the model ends with exactly one of these (stored as JSON)."""


def ok_result(payload: Any) -> OkResult:
    """A call's result when the tool succeeded."""
    return OkResult(payload=payload)


def error_result(code: str, message: str) -> ErrorResult:
    """A call's result when it failed or was refused; the model sees ``code`` and ``message``."""
    return ErrorResult(error=ErrorDetail(code=code, message=message))


def result_code(result: OkResult | ErrorResult) -> str:
    """``ok``, or the error's code: how events and traces show a result."""
    return "ok" if isinstance(result, OkResult) else result.error.code


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_hash(self) -> dict[str, HashValue]:
        """Every non-None field, encoded for HSET, and the schema it is written under."""
        kinds = kinds_of(type(self))
        fields: dict[str, HashValue] = {
            name: encode_value(kinds[name], value)
            for name, value in self.model_dump(mode="json").items()
            if value is not None
        }
        fields[SCHEMA_FIELD] = str(LEDGER_SCHEMA)
        return fields

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes] | Mapping[str, str]) -> Self:
        """Parse an HGETALL reply (bytes or decoded) back into the record."""
        kinds = kinds_of(cls)
        data: dict[str, Any] = {}
        for k, v in raw.items():
            name = k.decode() if isinstance(k, bytes) else k
            kind = kinds.get(name)
            if kind is None:
                if name == SCHEMA_FIELD:
                    refuse_newer(cls.__name__, v)
                continue
            text = v.decode() if isinstance(v, bytes) else v
            data[name] = decode_value(kind, text)
        return cls.model_validate(data)


def refuse_newer(what: str, version: bytes | str) -> None:
    """Raise `NewerSchemaError` if ``version`` (a record's ``v``) is newer than this code reads."""
    text = version.decode() if isinstance(version, bytes) else version
    if not text.isdigit() or int(text) > LEDGER_SCHEMA:
        raise NewerSchemaError(what, text, LEDGER_SCHEMA)


class RunRecord(_Record):
    """One run: what it may do, how far it got, and how it ended."""

    run_id: str = Field(min_length=1, max_length=128)
    status: RunState = RunState.QUEUED
    api: Api
    model: str
    instructions: str | None = None
    input: str
    turn: int = Field(default=0, ge=0)
    max_turns: int = Field(default=10, ge=1)
    max_total_tokens: int | None = None
    deadline_ms: int | None = None
    """Wall-clock deadline (epoch ms) after which the run hands off."""
    usage_input_tokens: int = 0
    usage_output_tokens: int = 0
    identity: dict[str, Any] = Field(default_factory=dict)
    """Who the run acts for, as verified when it was created; the validator's authorization
    input."""
    vouched_by: str | None = None
    """Who vouched for ``identity``: ``service:NAME`` (a signed submission) or ``issuer:ISS``."""
    allowed_tools: list[str] = Field(default_factory=list)
    """The registered tools this run may use, fixed when it is created."""
    spec_hash: str | None = None
    """Hash of the canonical spec and verified identity it was created from: a second start
    of the run id is the same request only if it hashes the same (`callgate.runspec`)."""
    batch_policy: BatchPolicy = "hold_effects"
    approval_ttl_s: float | None = None
    """How long a pending approval of this run lives; None: the deployment's default."""
    acceptance: dict[str, Any] | None = None
    final_text: str | None = None
    reason: str | None = None
    created_ms: int = 0
    updated_ms: int = 0
    extra: dict[str, Any] = Field(default_factory=dict)


def truncate_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, never inside a character."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode(errors="ignore")


def _cut_raw(text: str) -> str:
    return truncate_utf8(text, RAW_ARGUMENTS_MAX_BYTES)


class CallRecord(_Record):
    """One tool call, keyed by callgate's own ``call_id``; its single recorded outcome."""

    run_id: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    turn: int = Field(ge=0)
    index: int = Field(ge=0)
    """Position in the provider's order within the turn; results go back in this order."""
    provider_call_id: str
    tool: str
    tool_version: str | None = None
    arguments: dict[str, Any] | None = None
    """The parsed, canonical arguments; None if they did not parse."""
    raw_arguments: Annotated[str, AfterValidator(_cut_raw)] = ""
    """The text the model sent, cut to `RAW_ARGUMENTS_MAX_BYTES`."""
    args_hash: str | None = None
    effect: Effect | None = None
    effect_source: str | None = None
    """Where the effect came from and why (`Tool.effect_source`), as the validator decided."""
    resource_key: str | None = None
    state: CallState = CallState.REQUESTED
    decision: str | None = None
    reason: str | None = None
    approval_id: str | None = None
    operation_id: str | None = None
    """The idempotency key sent downstream; fixed before the first attempt."""
    attempts: int = 0
    result: CallOutcome | None = None
    executor: str | None = None
    """The consumer that took the call to ``executing``."""
    created_ms: int = 0
    updated_ms: int = 0


class Event(BaseModel):
    """One event of a run's event log.  A ledger step writes its events as one stream entry
    (fields ``t``, ``type``, ``d``: the first event; ``also``: the others, as ``[type, data]``
    pairs), so an event's id is its entry's id, and ``<entry id>.<n>`` for the n-th other."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Orders events within the run (`event_order`)."""
    t_ms: int
    type: str
    """What happened, e.g. ``run.transition`` or ``call.transition``."""
    data: dict[str, Any] = Field(default_factory=dict)
    """Redacted details (never secrets or hidden reasoning)."""


def entry_events(entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> list[Event]:
    """The events of one XRANGE / XREAD entry, in the order the step wrote them."""
    raw = {k.decode() if isinstance(k, bytes) else k: v for k, v in fields.items()}
    first = _text(entry_id)
    t_ms = int(raw.get("t", b"0"))
    pairs: list[Any] = [[_text(raw.get("type", b"")), orjson.loads(raw["d"]) if "d" in raw else {}]]
    if "also" in raw:
        pairs += orjson.loads(raw["also"])
    return [
        Event(id=first if n == 0 else f"{first}.{n}", t_ms=t_ms, type=kind,
              data=data if isinstance(data, dict) else {"value": data})
        for n, (kind, data) in enumerate(pairs)
    ]  # fmt: skip


def event_order(event_id: str) -> tuple[int, int, int]:
    """An event id as what orders it: its entry's (milliseconds, sequence), then its place."""
    entry, _, place = event_id.partition(".")
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0), int(place or 0)


def read_from(event_id: str) -> str:
    """The id to XREAD after to miss nothing after ``event_id``: the entry before its entry's
    (the rest of its entry's events may still be due; filter them by `event_order`)."""
    ms, seq, _ = event_order(event_id)
    if (ms, seq) == (0, 0):
        return "0-0"
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{2**64 - 1}"


def entry_of(event_id: str) -> str:
    """The id of the stream entry that holds the event ``event_id``."""
    return event_id.partition(".")[0]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
