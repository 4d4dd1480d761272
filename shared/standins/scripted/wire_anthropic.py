"""Anthropic Messages (`POST /v1/messages`): a `Turn` as a Message body or an SSE event list.

Shapes follow tests/provider_fixtures/anthropic-messages: `event:` + `data:` frames; message_start
(stop_reason null) → per block content_block_start / deltas / content_block_stop (index =
position in `content`; a tool block's `input` starts `{}` and its first `partial_json` is "")
→ one `ping` after the first block start → message_delta (stop_reason, cumulative usage) →
message_stop. A max-token cut leaves the last tool block without content_block_stop, exactly
like stream-max-tokens-mid-tool-use.sse. A mid-stream failure is `event: error` (the SDK raises
APIStatusError with the stream's status 200). Anthropic has no content-filter stop: it is
rendered as stop_reason `refusal` after the partial text. A non-streaming body cannot carry
invalid or cut JSON (`input` is an object): it gets the partially parsed object the SDK's
stream accumulator would build (jiter partial mode), `{}` if nothing parses.
"""

from __future__ import annotations

from typing import Any

import orjson
from jiter import from_json

from callgate.standins.scripted.common import (
    SSE,
    ApiError,
    CallSpec,
    Stop,
    Turn,
    anthropic_request_id,
    arg_fragments,
    call_ids,
    input_tokens,
    interleave,
    output_tokens,
    rand_alnum,
    sequential,
    text_fragments,
)
from callgate.standins.scripted.rules import Violation
from callgate.standins.scripted.scenario import Fault

STOP = {
    "end": "end_turn",
    "tool_calls": "tool_use",
    "max_tokens": "max_tokens",
    "content_filter": "refusal",
    "refusal": "refusal",
}
_RATE = (
    "This request would exceed your organization's rate limit of 50 requests per minute "
    "(org: 00000000-0000-4000-8000-5c21a7ed0000, model: {model}). For details, refer to: "
    "https://docs.claude.com/en/api/rate-limits. You can see the response headers for current "
    "usage. Please reduce the prompt length or the maximum tokens requested, or try again later."
)
_FILTERED = "This response was blocked by the content filter."


def error(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> ApiError:
    body = {
        "type": "error",
        "error": {"type": type_, "message": message},
        "request_id": anthropic_request_id(),
    }
    retry = "true" if status in (408, 409, 429) or status >= 500 else "false"
    return ApiError(status, body, {"x-should-retry": retry, **(headers or {})})


def validate(body: dict[str, Any]) -> ApiError | None:
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return error(400, "invalid_request_error", f"{name}: Field required")
    return None


def not_found(model: str) -> ApiError:
    return error(404, "not_found_error", f"model: {model}")


def bad_request(v: Violation) -> ApiError:
    return error(400, "invalid_request_error", v.message)


def rate_limited(fault: Fault, model: str) -> ApiError:
    headers = {"retry-after": str(max(1, round(fault.retry_after_s)))}
    return error(429, "rate_limit_error", _RATE.format(model=model), headers)


def server_error() -> ApiError:
    return error(500, "api_error", "Internal server error")


def overloaded() -> ApiError:
    return error(529, "overloaded_error", "Overloaded")


def _ids(turn: Turn) -> list[str]:
    return [i or "" for i in call_ids(turn, lambda: f"toolu_01{rand_alnum(22)}")]


def _input(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        try:
            parsed = from_json(arguments.encode(), partial_mode=True)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}


def _usage(turn: Turn, body: dict[str, Any], *, start: bool = False) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens(body),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1 if start else output_tokens(turn),
        "service_tier": "standard",
        "inference_geo": "not_available",
    }


def _stop_fields(turn: Turn) -> dict[str, Any]:
    fields: dict[str, Any] = {"stop_reason": STOP[turn.stop], "stop_sequence": None}
    if turn.stop in ("refusal", "content_filter"):
        fields["stop_details"] = {
            "type": "refusal",
            "category": None,
            "explanation": turn.refusal or _FILTERED,
            "recommended_model": None,
        }
    return fields


def _message(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": turn.model or body.get("model"),
        "id": f"msg_01{rand_alnum(22)}",
        "type": "message",
        "role": "assistant",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(turn, body, start=True),
    }


def render_json(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    for tid, call in zip(_ids(turn), turn.calls, strict=True):
        content.append(
            {
                "type": "tool_use",
                "id": tid,
                "name": call.name,
                "input": _input(call.arguments),
                "caller": {"type": "direct"},
            }
        )
    msg = _message(turn, body)
    msg.update(content=content, usage=_usage(turn, body), **_stop_fields(turn))
    return msg


def _text_events(turn: Turn) -> list[dict[str, Any]]:
    if not turn.text:
        return []
    return [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": d}}
            for d in text_fragments(turn.text)
        ),
        {"type": "content_block_stop", "index": 0},
    ]


def _tool_events(turn: Turn, base: int) -> list[dict[str, Any]]:
    n, ids = len(turn.calls), _ids(turn)
    starts = [
        {
            "type": "content_block_start",
            "index": base + i,
            "content_block": {
                "type": "tool_use",
                "id": ids[i],
                "name": c.name,
                "input": {},
                "caller": {"type": "direct"},
            },
        }
        for i, c in enumerate(turn.calls)
    ]
    frags = [["", *arg_fragments(c.arguments, one_char=turn.char_fragments)] for c in turn.calls]
    order = interleave(frags) if turn.interleave else sequential(frags)
    deltas = [
        {
            "type": "content_block_delta",
            "index": base + i,
            "delta": {"type": "input_json_delta", "partial_json": d},
        }
        for i, d in order
    ]
    stops = [
        [{"type": "content_block_stop", "index": base + i}] if c.complete else []
        for i, c in enumerate(turn.calls)
    ]
    if turn.interleave:
        return [*starts, *deltas, *(e for s in stops for e in s)]
    own = [[e for e in deltas if e["index"] == base + i] for i in range(n)]
    return [e for i in range(n) for e in [starts[i], *own[i], *stops[i]]]


def render_stream(
    turn: Turn, body: dict[str, Any], error_after: int | None, error_type: str | None = None
) -> list[SSE]:
    """The event list; with `error_after`, the first N events then one `event: error`."""
    blocks = _text_events(turn) + _tool_events(turn, 1 if turn.text else 0)
    evs: list[dict[str, Any]] = [{"type": "message_start", "message": _message(turn, body)}]
    ping = {"type": "ping"}
    evs += [blocks[0], ping, *blocks[1:]] if blocks else [ping]
    usage = _usage(turn, body)
    delta_usage = {
        k: usage[k]
        for k in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
        )
    }
    evs.append({"type": "message_delta", "delta": _stop_fields(turn), "usage": delta_usage})
    evs.append({"type": "message_stop"})
    if error_after is not None:
        kind = error_type or "overloaded_error"
        text = "Overloaded" if kind == "overloaded_error" else "Internal server error"
        err = {"type": kind, "message": text}
        evs = [*evs[:error_after], {"type": "error", "error": err}]
    return [SSE(e["type"], e) for e in evs]


_RECORDED_STOP: dict[str | None, Stop] = {"max_tokens": "max_tokens", "refusal": "refusal"}


def recorded_turn(raw: dict[str, Any]) -> Turn:
    """A recorded Messages body (what the ledger keeps of a turn) as the `Turn` it said."""
    blocks = raw.get("content") or []
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
    calls = [
        CallSpec(b["name"], orjson.dumps(b.get("input") or {}).decode(), True, b.get("id"))
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    stop: Stop = _RECORDED_STOP.get(raw.get("stop_reason"), "tool_calls" if calls else "end")
    if stop == "max_tokens" and calls:
        calls[-1] = CallSpec(calls[-1].name, calls[-1].arguments, False, calls[-1].call_id)
    details = raw.get("stop_details") or {}
    refusal = (details.get("explanation") or "") if stop == "refusal" else None
    return Turn(text=text, refusal=refusal, calls=tuple(calls), stop=stop)
