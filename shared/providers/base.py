"""Neutral types every provider adapter speaks: the turn going in, the event coming out.

The loop never sees a provider's wire shapes except as opaque, provider-native history
items (`TurnRecord.assistant_items`, `ProviderAdapter.result_items`), which it stores and
sends back unchanged.  Everything it *decides* on is one of five internal events::

    TurnEvent (alias ProviderEvent)
    ├── FinalAnswer     the model answered; no tool requests
    ├── ToolRequests    one or more complete, parsed tool calls (never a truncated one)
    ├── Refused         the model declined
    ├── Incomplete      the response is unusable: truncated, filtered, malformed
    └── RequestFailed   the request itself failed; kind = timeout | transport_error |
                        rate_limited | overloaded | server_error | bad_request

All are frozen dataclasses with a ``kind`` tag; `TURN_EVENT` validates a stored
(`event_to_json`) event back into its class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, TypeAdapter

JsonDict = dict[str, Any]
"""A JSON object as the provider sent it (or will receive it)."""


class ToolSpecLike(Protocol):
    """Anything with a tool's name, description and argument schema (e.g. a `ToolSpec`)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class TurnInput:
    """Everything one model request needs; history is provider-native and sent as is."""

    model: str
    history: list[JsonDict]
    """Provider-native items: Responses input items, Chat messages, Anthropic messages."""
    tools: Sequence[ToolSpecLike] = ()
    instructions: str | None = None
    """System prompt; sent beside the history, never stored in it."""
    max_output_tokens: int | None = None
    timeout_s: float = 60.0
    """Bounds the whole turn (connect, first byte and the full stream)."""


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One complete tool call: arguments parsed and checked to be a JSON object."""

    provider_call_id: str
    """The provider's id (call_…/toolu_…); the model controls it: a pairing key only."""
    name: str
    arguments: JsonDict
    raw_arguments: str
    """The argument text exactly as assembled from the wire."""
    raw_item: JsonDict
    """The provider's item for this call (function_call item, tool_calls entry, tool_use)."""


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    text: str
    kind: Literal["final_answer"] = "final_answer"


@dataclass(frozen=True, slots=True)
class ToolRequests:
    calls: tuple[ToolCallRequest, ...]
    """At least one, in provider order; results must be returned in this order."""
    text: str | None = None
    """Text the model sent with the calls (commentary), if any."""
    kind: Literal["tool_requests"] = "tool_requests"


@dataclass(frozen=True, slots=True)
class Refused:
    message: str
    kind: Literal["refused"] = "refused"


IncompleteReason = Literal[
    "max_tokens",
    "content_filter",
    "stream_ended",
    "invalid_arguments",
    "duplicate_call_id",
    "missing_call_id",
    "other",
]


@dataclass(frozen=True, slots=True)
class Incomplete:
    """A response that must not be acted on; any tool call in it is never executed."""

    reason: IncompleteReason
    detail: str = ""
    kind: Literal["incomplete"] = "incomplete"


FailureKind = Literal[
    "timeout", "transport_error", "rate_limited", "overloaded", "server_error", "bad_request"
]


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The request failed before a usable response; whether to retry is data here.

    Its ``kind`` tag *is* the failure class (it never collides with the other tags)."""

    kind: FailureKind
    message: str
    status: int | None = None
    """HTTP status, when there was one (200 for an error event inside a stream)."""
    retry_after_s: float | None = None
    retryable: bool = False


TurnEvent = Annotated[
    FinalAnswer | ToolRequests | Refused | Incomplete | RequestFailed, Field(discriminator="kind")
]
ProviderEvent = TurnEvent
TURN_EVENT: TypeAdapter[TurnEvent] = TypeAdapter(TurnEvent)
"""`TURN_EVENT.validate_python(event_to_json(e)) == e`."""


def event_to_json(event: TurnEvent) -> JsonDict:
    return dataclasses.asdict(event)


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What the ledger keeps about one request, whatever its outcome."""

    provider: str
    """"openai" or "anthropic"."""
    api: str
    """"openai-responses", "openai-chat" or "anthropic-messages"."""
    sdk_version: str
    api_version: str | None
    """The API version header the SDK sent (anthropic-version), None if it sends none."""
    response_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    raw_output: JsonDict = field(default_factory=dict)
    """The assembled response as the provider returned it (partial when the stream broke)."""
    assistant_items: list[JsonDict] = field(default_factory=list)
    """Exactly what to append to the history for this turn; empty unless the event is
    FinalAnswer, ToolRequests or Refused (a broken response is never replayed)."""

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.output_tokens)

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    event: TurnEvent
    record: TurnRecord


@dataclass(frozen=True, slots=True)
class ToolResultInput:
    """A call's result to send back, keyed by the provider's call id."""

    provider_call_id: str
    content: str
    is_error: bool = False


class ProviderAdapter(Protocol):
    """One wire protocol. `complete` never raises for provider failures (it returns
    `RequestFailed`); an exception out of it is a bug."""

    api: str

    def initial_history(self, user_input: str) -> list[JsonDict]: ...

    async def complete(self, turn: TurnInput) -> TurnOutcome: ...

    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        """History items to append after the assistant items; `results` in call order."""
        ...

    def correction_items(self, text: str) -> list[JsonDict]:
        """A user message asking the model to fix its answer."""
        ...
