"""Neutral helpers the three adapters share: argument checks, call checks, error building.

Nothing here knows a provider; each adapter passes its own field values in.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import httpx2
from pydantic import BaseModel

from callgate.errors import (
    ProviderBadRequestError,
    ProviderError,
    ProviderOverloadedError,
    ProviderRateLimitedError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderTransportError,
)
from callgate.providers.base import (
    FailureKind,
    FinalAnswer,
    Incomplete,
    JsonDict,
    Refused,
    RequestFailed,
    ToolCallRequest,
    ToolRequests,
    TurnEvent,
    TurnOutcome,
    TurnRecord,
)
from callgate.tools.json_guard import exceeds_depth


def join_fragments(parts: Iterable[str]) -> str:
    """Concatenate text fragments, re-pairing UTF-16 surrogate halves split across them.

    A JSON string escape can carry half of a non-BMP character (``"\\ud83d"`` then
    ``"\\ude00"``); decoded separately each half is a lone surrogate, and the joined
    text would not encode as UTF-8.  Round-tripping through UTF-16 merges the pairs.
    """
    text = "".join(parts)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


MAX_PARSE_DEPTH = 256
"""Deeper argument text is refused before any parser sees it: the stdlib parser recurses and
raises RecursionError near 1000 levels, which failed the turn on every redelivery until the
run was dead-lettered.  Anything between the policy's own limit and this one is parsed and
then rejected by the policy with a structured ``arguments_too_deep`` error."""


def parse_arguments(raw: str) -> JsonDict | None:
    """The arguments object, or None if the text is not exactly one JSON object (or nests
    deeper than `MAX_PARSE_DEPTH`)."""
    if exceeds_depth(raw, MAX_PARSE_DEPTH):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class CallCandidate(NamedTuple):
    """A tool call as assembled from the wire, before any check."""

    provider_call_id: str | None
    name: str | None
    raw_arguments: str
    raw_item: JsonDict


def build_calls(candidates: Iterable[CallCandidate]) -> tuple[ToolCallRequest, ...] | Incomplete:
    """Check ids and arguments of every call; one bad call makes the whole turn Incomplete,
    because executing the good half of a parallel batch would leave the history unpairable."""
    calls: list[ToolCallRequest] = []
    seen: set[str] = set()
    for c in candidates:
        if not c.provider_call_id:
            return Incomplete(reason="missing_call_id", detail=f"call {c.name!r} has no id")
        if c.provider_call_id in seen:
            return Incomplete(reason="duplicate_call_id", detail=c.provider_call_id)
        seen.add(c.provider_call_id)
        if not c.name:
            return Incomplete(reason="other", detail=f"call {c.provider_call_id} has no name")
        arguments = parse_arguments(c.raw_arguments)
        if arguments is None:
            return Incomplete(
                reason="invalid_arguments",
                detail=f"{c.provider_call_id}: arguments are not a JSON object: "
                f"{c.raw_arguments[:200]!r}",
            )
        calls.append(
            ToolCallRequest(
                provider_call_id=c.provider_call_id,
                name=c.name,
                arguments=arguments,
                raw_arguments=c.raw_arguments,
                raw_item=c.raw_item,
            )
        )
    return tuple(calls)


def settle(event: TurnEvent, problem: TurnEvent | None) -> TurnEvent:
    """Combine what the assembled response says with what the stream itself showed.

    A broken stream is never a FinalAnswer or ToolRequests; a more specific outcome from
    the response (max_tokens, content_filter, a failed status) beats the stream problem."""
    if problem is None:
        return event
    if isinstance(problem, RequestFailed):
        return problem
    specific = isinstance(event, RequestFailed) or (
        isinstance(event, Incomplete) and event.reason != "other"
    )
    return event if specific else problem


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from retry-after-ms, or retry-after (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        with contextlib.suppress(ValueError):
            return max(float(value) / 1000.0, 0.0)
    value = headers.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(float(value), 0.0)
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(float(email.utils.mktime_tz(parsed)) - time.time(), 0.0)


ERRORS: dict[FailureKind, type[ProviderError]] = {
    "timeout": ProviderTimeoutError,
    "transport_error": ProviderTransportError,
    "rate_limited": ProviderRateLimitedError,
    "overloaded": ProviderOverloadedError,
    "server_error": ProviderServerError,
    "bad_request": ProviderBadRequestError,
}


def kind_for_status(status: int) -> FailureKind:
    if status == 408:
        return "timeout"
    if status == 429:
        return "rate_limited"
    if status in (503, 529):
        return "overloaded"
    if status >= 500 or status == 409:
        return "server_error"
    return "bad_request"


def make_error(
    kind: FailureKind,
    message: str,
    *,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    retryable: bool | None = None,
) -> ProviderError:
    """A classified ProviderError; the server's x-should-retry header, when present,
    overrides the class default, as both SDKs do."""
    headers = headers or {}
    error = ERRORS[kind](message, retry_after_s=retry_after_s(headers), status=status)
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        error.retryable = should_retry == "true"
    if retryable is not None:
        error.retryable = retryable
    return error


def to_failed(error: ProviderError) -> RequestFailed:
    kinds = [k for k, cls in ERRORS.items() if isinstance(error, cls)]
    kind: FailureKind = kinds[0] if kinds else "server_error"
    return RequestFailed(
        kind=kind,
        message=error.message,
        status=error.status,
        retry_after_s=error.retry_after_s,
        retryable=error.retryable,
    )


@contextlib.contextmanager
def map_transport_errors() -> Iterator[None]:
    """Errors that reach us past the SDK's own mapping: the turn deadline, bare httpx2
    transport errors raised from a stream iterator, and unparseable SSE data."""
    try:
        yield
    except (TimeoutError, httpx2.TimeoutException) as exc:
        raise ProviderTimeoutError(f"timed out: {exc!r}") from exc
    except httpx2.RequestError as exc:
        raise ProviderTransportError(f"transport error: {exc!r}") from exc
    except json.JSONDecodeError as exc:
        raise ProviderServerError(f"malformed response data: {exc}") from exc


@contextlib.contextmanager
def map_connection_errors(timeout: type[Exception], connection: type[Exception]) -> Iterator[None]:
    """An SDK's `timeout` and `connection` exception types (the first a subclass of the
    second; the str of either is its message), and all `map_transport_errors` maps."""
    try:
        with map_transport_errors():
            yield
    except timeout as exc:
        raise ProviderTimeoutError(f"timed out: {exc}") from exc
    except connection as exc:
        raise ProviderTransportError(f"{exc} ({exc.__cause__!r})") from exc


def error_message(body: object, fallback: str) -> str:
    """The API's own message from an error body (``{message}`` or ``{error: {message}}``)."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return fallback


AS_IS = ("input", "messages", "tools")
"""Request parts an adapter hands its SDK as they are (`sdk_arguments`)."""


def sdk_arguments(request: JsonDict, placeholders: JsonDict | None = None) -> JsonDict:
    """Keyword arguments for an SDK's ``create`` that send the history and tools of
    ``request`` as they are, through ``extra_body``.

    The openai SDK walks every argument against its TypedDicts before sending it, to
    rename aliased keys and encode files.  Our request is the wire's JSON already, which the
    walk returns unchanged, at a cost that grows with the history: with 81 items (a 40-turn
    run) a streamed request took 100 ms here on Responses and 50 ms on Chat, and 11 and 9 ms
    without it.  (The anthropic SDK's walk cost nothing measurable, so its adapter keeps the
    plain call.)  ``extra_body`` is merged into the JSON body unwalked, its keys winning, so
    ``placeholders`` fill what the signature requires and are replaced on the wire."""
    arguments = {key: value for key, value in request.items() if key not in AS_IS}
    arguments.update(placeholders or {})
    arguments["extra_body"] = {key: request[key] for key in AS_IS if key in request}
    return arguments


def drop_none(item: Mapping[str, Any]) -> JsonDict:
    return {k: v for k, v in item.items() if v is not None}


def version_header(headers: Mapping[str, object], name: str) -> str | None:
    value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value if isinstance(value, str) else None


def as_dict(obj: object) -> JsonDict:
    """An SDK object as the JSON the provider sent (wire names, unset fields left out)."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(obj, dict):
        return obj
    raise TypeError(f"unexpected SDK object {type(obj).__name__}")


class RecordMeta(NamedTuple):
    provider: str
    api: str
    sdk_version: str
    api_version: str | None


_REPLAYABLE = (FinalAnswer, ToolRequests, Refused)


def outcome(
    meta: RecordMeta,
    event: TurnEvent,
    raw: JsonDict,
    *,
    response_id: object,
    usage: tuple[object, object],
    items: list[JsonDict],
) -> TurnOutcome:
    """Bundle event and record; only a usable event keeps its assistant items."""
    record = TurnRecord(
        provider=meta.provider,
        api=meta.api,
        sdk_version=meta.sdk_version,
        api_version=meta.api_version,
        response_id=response_id if isinstance(response_id, str) else None,
        input_tokens=usage[0] if isinstance(usage[0], int) else 0,
        output_tokens=usage[1] if isinstance(usage[1], int) else 0,
        raw_output=raw,
        assistant_items=items if isinstance(event, _REPLAYABLE) else [],
    )
    return TurnOutcome(event=event, record=record)
