"""The three protocols as one table of functions, so the request handler is written once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from callgate.standins.scripted import history, openai_errors, rules
from callgate.standins.scripted import wire_anthropic as anthropic_wire
from callgate.standins.scripted import wire_chat as chat_wire
from callgate.standins.scripted import wire_responses as responses_wire
from callgate.standins.scripted import wire_responses_sse as responses_sse
from callgate.standins.scripted.common import (
    SSE,
    ApiError,
    Turn,
    anthropic_request_id,
    openai_request_id,
)
from callgate.standins.scripted.scenario import Fault

_ORG = "00000000-0000-4000-8000-5c21a7ed0000"


@dataclass(frozen=True)
class WireFormat:
    """One protocol's functions; the handler is the same for all three."""

    name: str
    rid_header: str
    new_rid: Callable[[], str]
    validate: Callable[[dict[str, Any]], ApiError | None]
    not_found: Callable[[str], ApiError]
    check: Callable[[dict[str, Any]], rules.Violation | None]
    bad_request: Callable[[rules.Violation], ApiError]
    conversation: Callable[[dict[str, Any]], history.Conversation]
    rate_limited: Callable[[Fault, str], ApiError]
    server_error: Callable[[], ApiError]
    overloaded: Callable[[], ApiError]
    render_json: Callable[[Turn, dict[str, Any]], dict[str, Any]]
    render_stream: Callable[[Turn, dict[str, Any], int | None, Fault | None], list[SSE]]

    def invalid(self, message: str) -> ApiError:
        return self.bad_request(rules.Violation("scripted", message))

    def headers(self, rid: str) -> dict[str, str]:
        """Per-response headers; the request id under the API's own header name."""
        if self.rid_header == "x-request-id":
            return {
                "x-request-id": rid,
                "openai-version": "2020-10-01",
                "openai-processing-ms": "42",
            }
        return {"request-id": rid, "anthropic-organization-id": _ORG}


def _responses_stream(t: Turn, b: dict[str, Any], n: int | None, f: Fault | None) -> list[SSE]:
    return responses_sse.render_stream(t, b, n)


def _chat_stream(t: Turn, b: dict[str, Any], n: int | None, f: Fault | None) -> list[SSE]:
    return chat_wire.render_stream(t, b, n)


def _anthropic_stream(t: Turn, b: dict[str, Any], n: int | None, f: Fault | None) -> list[SSE]:
    return anthropic_wire.render_stream(t, b, n, f.code if f else None)


RESPONSES = WireFormat(
    "responses",
    "x-request-id",
    openai_request_id,
    responses_wire.validate,
    responses_wire.not_found,
    rules.check_responses,
    openai_errors.bad_request,
    history.from_responses,
    openai_errors.rate_limited,
    openai_errors.server_error,
    openai_errors.overloaded,
    responses_wire.render_json,
    _responses_stream,
)
CHAT = WireFormat(
    "chat",
    "x-request-id",
    openai_request_id,
    chat_wire.validate,
    chat_wire.not_found,
    rules.check_chat,
    openai_errors.bad_request,
    history.from_chat,
    openai_errors.rate_limited,
    openai_errors.server_error,
    openai_errors.overloaded,
    chat_wire.render_json,
    _chat_stream,
)
ANTHROPIC = WireFormat(
    "anthropic",
    "request-id",
    anthropic_request_id,
    anthropic_wire.validate,
    anthropic_wire.not_found,
    rules.check_anthropic,
    anthropic_wire.bad_request,
    history.from_anthropic,
    anthropic_wire.rate_limited,
    anthropic_wire.server_error,
    anthropic_wire.overloaded,
    anthropic_wire.render_json,
    _anthropic_stream,
)
