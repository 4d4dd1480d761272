"""The facts a handler decides on: carried by its message, or read from the ledger — one type.

Every hop decides from a few fields of a few ledger records (the run's authority, a call's
tool and arguments, a turn's outcomes).  The writer of a message knows them and may carry
them along (``CALLGATE_CARRY``, on by default), which saves the reader a round trip; the
reader's loader returns the same facts type either way.  A fact type names only fields of
one record (`RecordFacts.record`), so the guard that binds a step to "the ledger still holds
exactly these facts" is derived from the type's own fields (`callgate.ledger.binding`): a
stale or forged message writes nothing, and its reader decides again from the ledger's facts
(`decide`).

The state a step moves from (``status``, ``state``, ``turn``) is the step's own guard, not a
fact: failing it is a lost race, not a mismatch.  Carried numbers are bounded here, so one no
record could hold fails to decode instead of raising in a handler before its guard.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, Literal, Self, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from callgate.logs import log_fields
from callgate.records import CallOutcome, CallRecord, Effect, RunRecord
from callgate.states import CallState

log = logging.getLogger("callgate.facts")

Record = RunRecord | CallRecord
F = TypeVar("F")
R = TypeVar("R")


class Mismatch:
    """What a handler's step returns when it met other facts than it decided on."""

    def __repr__(self) -> str:
        return "MISMATCH"


MISMATCH: Final = Mismatch()

CALLS_MAX = 10_000
"""More calls than any turn records (``max_calls_per_turn`` keeps a turn far below)."""
APPROVAL_TTL_MAX_S = 30 * 24 * 3600
"""The run spec's own maximum for ``approval_ttl_s``."""
ATTEMPTS_MAX = 1_000


class RecordFacts(BaseModel):
    """Values of some fields of one ledger record; field names are the record's own."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    record: ClassVar[type[RunRecord] | type[CallRecord]]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        unknown = set(cls.model_fields) - set(cls.record.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} names fields {cls.record.__name__} lacks: {unknown}")

    @classmethod
    def of(cls, record: Record) -> Self:
        """These facts as ``record`` holds them (a validated record: nothing to check again)."""
        values = {name: getattr(record, name) for name in cls.model_fields}
        return cast(Self, cls.model_construct(**values))

    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _field_names(type(self))}


@functools.cache
def _field_names(facts: type[RecordFacts]) -> tuple[str, ...]:
    """A facts type's fields, in order: every step that binds facts asks (pydantic's
    ``model_fields`` is a property that builds its answer)."""
    return tuple(facts.model_fields)


async def decide(
    carried: F | None,
    from_ledger: Callable[[], Awaitable[F | None]],
    act: Callable[[F], Awaitable[R | Mismatch]],
    where: Mapping[str, Any],
) -> R | None:
    """``act`` on the carried facts, else (none travelled, or the ledger did not hold them)
    on the ledger's; None when the ledger has none to act on (the work is done, or moved on).

    ``act`` returns `MISMATCH` only when its step met other facts than it was given."""
    if carried is not None:
        result = await act(carried)
        if not isinstance(result, Mismatch):
            return result
        distrusted(where)
    facts = await from_ledger()
    if facts is None:
        return None
    result = await act(facts)
    return None if isinstance(result, Mismatch) else result


def distrusted(where: Mapping[str, Any]) -> None:
    """Log that a message's facts were set aside for the ledger's (stale or forged)."""
    log.warning(
        "carried facts do not match the ledger; deciding from the ledger", extra=log_fields(**where)
    )


# -- the facts of each hop --------------------------------------------------------------------


class UsageFacts(RecordFacts):
    """The run's token totals a turn adds its usage to (`LoopSteps.model_response`)."""

    record = RunRecord
    usage_input_tokens: int
    usage_output_tokens: int


class DecideRunFacts(RecordFacts):
    """The run's authority the validator decides a turn's calls under."""

    record = RunRecord
    identity: dict[str, Any]
    allowed_tools: list[str]
    batch_policy: Literal["hold_effects", "run_allowed"]
    approval_ttl_s: float | None = Field(gt=0, le=APPROVAL_TTL_MAX_S, allow_inf_nan=False)


class ProposedCall(RecordFacts):
    """One call as model_turn recorded it."""

    record = CallRecord
    call_id: str = Field(min_length=1, max_length=128)
    index: int = Field(ge=0, lt=CALLS_MAX)
    tool: str
    raw_arguments: str


class DecideFacts(BaseModel):
    """All the validator decides a turn from: the run's authority and the calls as recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    run: DecideRunFacts
    calls: tuple[ProposedCall, ...] = Field(min_length=1, max_length=CALLS_MAX)


class ExecRunFacts(RecordFacts):
    """Who a call runs for."""

    record = RunRecord
    identity: dict[str, Any]


class ExecCallFacts(RecordFacts):
    """A decided call as the executor runs it (and the approval it runs under, if any)."""

    record = CallRecord
    tool: str = Field(min_length=1, max_length=128)
    tool_version: str = Field(min_length=1, max_length=64)
    effect: Effect
    arguments: dict[str, Any]
    args_hash: str | None = None
    operation_id: str | None = None
    approval_id: str | None = None


class ExecFacts(BaseModel):
    """All an executor needs to run one call, and the state it takes it from."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    run: ExecRunFacts
    call: ExecCallFacts
    state: CallState = CallState.ALLOWED
    attempts: int = Field(default=0, ge=0, le=ATTEMPTS_MAX)

    @classmethod
    def of(cls, run: RunRecord, call: CallRecord) -> ExecFacts | None:
        """The facts of a decided call; None for one that was never decided to run."""
        if call.tool_version is None or call.effect is None or call.arguments is None:
            return None
        return cls(
            run=ExecRunFacts.of(run),
            call=ExecCallFacts.of(call),
            state=call.state,
            attempts=call.attempts,
        )


class SettledCall(RecordFacts):
    """A call's outcome as its result message said it was recorded."""

    record = CallRecord
    state: CallState
    result: CallOutcome | None
