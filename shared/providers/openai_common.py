"""What the two OpenAI adapters share: the client, the SDK error boundary and the turn
record (`OpenAIAdapter`).

The SDK is imported where it is first needed, not here: a process that only builds a
protocol's history (ingress) or never calls the provider must not pay for its import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openai

from callgate.errors import ProviderError
from callgate.providers.adapter import A, SdkAdapter
from callgate.providers.base import FailureKind, JsonDict, TurnEvent
from callgate.providers.common import (
    RecordMeta,
    error_message,
    kind_for_status,
    make_error,
    map_connection_errors,
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


class OpenAIAdapter(SdkAdapter[A, "openai.AsyncOpenAI"]):
    """What both OpenAI APIs share: the client, the error boundary and the turn record.

    A subclass supplies `api`, the usage field names, its stream assembler,
    `to_provider` / `from_provider`, `result_items` and `_create` (the SDK call).
    """

    from_provider: Callable[[JsonDict], tuple[TurnEvent, list[JsonDict]]]
    """A complete response's event and the items it adds to the history."""

    def _new_client(self) -> openai.AsyncOpenAI:
        return make_client()

    def _map_errors(self) -> AbstractContextManager[None]:
        return map_errors()

    def _record_meta(self) -> RecordMeta:
        return RecordMeta(PROVIDER, self.api, sdk_version(), api_version(self.client))

    def _event(self, response: JsonDict, assembler: A) -> tuple[TurnEvent, list[JsonDict]]:
        return self.from_provider(response)
