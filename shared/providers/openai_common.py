"""What the two OpenAI adapters share: the client, the SDK error boundary, and the
adapter body around the one SDK call (`OpenAIAdapter`).

The SDK is imported where it is first needed, not here: a process that only builds a
protocol's history (ingress) or never calls the provider must not pay for its import.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:
    import openai

from callgate.errors import ProviderError
from callgate.providers.base import (
    FailureKind,
    JsonDict,
    ToolResultInput,
    TurnEvent,
    TurnInput,
    TurnOutcome,
)
from callgate.providers.common import (
    RecordMeta,
    as_dict,
    error_message,
    kind_for_status,
    make_error,
    map_connection_errors,
    outcome,
    settle,
    to_failed,
    version_header,
)

PROVIDER = "openai"

# Error codes / types seen in error bodies that arrive without an HTTP status (an `error`
# event inside a 200 stream, or `response.error` of a failed response).
ERROR_CODES: dict[str, FailureKind] = {
    "rate_limit_exceeded": "rate_limited",
    "insufficient_quota": "rate_limited",
    "tokens": "rate_limited",
    "requests": "rate_limited",
    "server_error": "server_error",
    "server_is_overloaded": "overloaded",
    "overloaded": "overloaded",
    "invalid_request_error": "bad_request",
    "invalid_prompt": "bad_request",
    "context_length_exceeded": "bad_request",
}
# Retrying cannot help these even though they come as 429.
NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})


def make_client() -> openai.AsyncOpenAI:
    """Endpoint and key come from OPENAI_BASE_URL / OPENAI_API_KEY; retries are the
    model_turn worker's job (counted against the run's budget), so the SDK makes none."""
    import openai

    return openai.AsyncOpenAI(max_retries=0)


def sdk_version() -> str:
    import openai

    return openai.__version__


def api_version(client: openai.AsyncOpenAI) -> str | None:
    return version_header(client.default_headers, "openai-version")


def _codes(body: object) -> list[str]:
    if not isinstance(body, dict):
        return []
    inner = body.get("error")
    found = [body.get("code"), body.get("type")]
    if isinstance(inner, dict):
        found = [inner.get("code"), inner.get("type"), *found]
    return [c for c in found if isinstance(c, str)]


def error_from_body(body: object, fallback: str, *, status: int | None = None) -> ProviderError:
    """Classify an error body that has no meaningful HTTP status, by its code then type."""
    codes = _codes(body)
    kinds = [ERROR_CODES[c] for c in codes if c in ERROR_CODES]
    kind: FailureKind = kinds[0] if kinds else "server_error"
    retryable = False if NOT_RETRYABLE_CODES.intersection(codes) else None
    return make_error(kind, error_message(body, fallback), status=status, retryable=retryable)


@contextlib.contextmanager
def map_errors() -> Iterator[None]:
    """Map every openai SDK exception to the error tree, once, at the boundary."""
    import openai

    try:
        with map_connection_errors(openai.APITimeoutError, openai.APIConnectionError):
            yield
    except openai.APIStatusError as exc:
        codes = _codes(exc.body)
        raise make_error(
            kind_for_status(exc.status_code),
            error_message(exc.body, exc.message),
            status=exc.status_code,
            headers=exc.response.headers,
            retryable=False if NOT_RETRYABLE_CODES.intersection(codes) else None,
        ) from exc
    except openai.APIError as exc:
        # The SDK raises a bare APIError for a stream event carrying an `error` object,
        # i.e. inside a 200 response.
        raise error_from_body(exc.body, exc.message, status=200) from exc


class Assembler(Protocol):
    """Builds one complete response from a stream's events."""

    def feed(self, event: JsonDict) -> None: ...

    def finish(self) -> tuple[JsonDict, TurnEvent | None]:
        """The response as assembled, and what the stream itself says is wrong, if anything."""
        ...


class RequestBuilder(Protocol):
    def __call__(self, turn: TurnInput, *, stream: bool) -> JsonDict:
        """The SDK call's arguments for a turn."""
        ...


A = TypeVar("A", bound=Assembler)


class OpenAIAdapter(abc.ABC, Generic[A]):
    """The `ProviderAdapter` body both OpenAI APIs share; streams unless `stream=False`.

    A subclass supplies what differs: `api`, the usage field names, its stream assembler,
    `to_provider` / `from_provider`, `result_items` and `_create` (the SDK call).
    """

    api: str
    usage_fields: tuple[str, str]
    """Names of the input and output token counts in the response's `usage`."""
    assembler: type[A]
    to_provider: RequestBuilder
    from_provider: Callable[[JsonDict], tuple[TurnEvent, list[JsonDict]]]
    """A complete response's event and the items it adds to the history."""

    def __init__(self, *, stream: bool = True) -> None:
        self.stream = stream
        self._client: openai.AsyncOpenAI | None = None

    @property
    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = make_client()
        return self._client

    def initial_history(self, user_input: str) -> list[JsonDict]:
        return [{"role": "user", "content": user_input}]

    def correction_items(self, text: str) -> list[JsonDict]:
        return [{"role": "user", "content": text}]

    @abc.abstractmethod
    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        """Tool results as this API's history items, each under its own call id."""

    @abc.abstractmethod
    async def _create(self, request: JsonDict, timeout_s: float) -> Any:
        """The SDK call: a response object, or an `AsyncStream` of events when streaming."""

    async def complete(self, turn: TurnInput) -> TurnOutcome:
        assembler = self.assembler()
        request = self.to_provider(turn, stream=self.stream)
        try:
            with map_errors():
                async with asyncio.timeout(turn.timeout_s):
                    response, problem = await self._call(request, assembler, turn.timeout_s)
        except ProviderError as exc:
            return self._outcome(to_failed(exc), assembler.finish()[0], [])
        event, items = self.from_provider(response)
        return self._outcome(settle(event, problem), response, items)

    async def _call(
        self, request: JsonDict, assembler: A, timeout_s: float
    ) -> tuple[JsonDict, TurnEvent | None]:
        created = await self._create(request, timeout_s)
        if not self.stream:
            return as_dict(created), None
        stream = cast("openai.AsyncStream[Any]", created)
        async with stream:
            async for event in stream:
                assembler.feed(as_dict(event))
        return assembler.finish()

    @functools.cached_property
    def _meta(self) -> RecordMeta:
        """Read once: the client builds its default headers anew on every read."""
        return RecordMeta(PROVIDER, self.api, sdk_version(), api_version(self.client))

    def _outcome(self, event: TurnEvent, raw: JsonDict, items: list[JsonDict]) -> TurnOutcome:
        usage = raw.get("usage") or {}
        inputs, outputs = self.usage_fields
        return outcome(
            self._meta,
            event,
            raw,
            response_id=raw.get("id"),
            usage=(usage.get(inputs), usage.get(outputs)),
            items=items,
        )
