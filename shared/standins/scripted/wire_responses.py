"""OpenAI Responses (`POST /v1/responses`): request checks, items and the JSON body.

Shapes follow tests/provider_fixtures/openai-responses (2025–2026 wire): `resp_`/`msg_`/`fc_` item
ids, `call_` call ids, `usage.input_tokens_details.cache_write_tokens` (required by the 3.57
types), request fields echoed in the envelope. `wire_responses_sse` builds the stream from the
same item builders, so streamed and non-streamed answers agree.
"""

from __future__ import annotations

from typing import Any

from callgate.standins.scripted import openai_errors
from callgate.standins.scripted.common import (
    ApiError,
    CallSpec,
    Stop,
    Turn,
    call_ids,
    input_tokens,
    now_s,
    output_tokens,
    rand_alnum,
    rand_hex,
)

_ECHO = (
    "instructions",
    "max_output_tokens",
    "previous_response_id",
    "metadata",
    "store",
    "temperature",
    "top_p",
    "tool_choice",
    "parallel_tool_calls",
    "truncation",
)
_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "previous_response_id": None,
    "metadata": {},
    "store": True,
    "temperature": 1.0,
    "top_p": 1.0,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "truncation": "disabled",
}


def validate(body: dict[str, Any]) -> ApiError | None:
    """Request-level checks the real API makes before looking at the history."""
    if not isinstance(body.get("model"), str):
        return openai_errors.missing_parameter("model")
    prev = body.get("previous_response_id")
    if prev:
        return openai_errors.error(
            400,
            f"Previous response with id '{prev}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return None


def not_found(model: str) -> ApiError:
    msg = f"The requested model '{model}' does not exist."
    return openai_errors.error(400, msg, param="model", code="model_not_found")


class Ids:
    """The ids of one response: fresh per item, call ids per the turn's `id_mode`."""

    def __init__(self, turn: Turn) -> None:
        self.resp = f"resp_{rand_hex(50)}"
        self.msg = f"msg_{rand_hex(50)}"
        self.items = [f"fc_{rand_hex(50)}" for _ in turn.calls]
        self.calls = [i or "" for i in call_ids(turn, lambda: f"call_{rand_alnum(24)}")]


def message_item(turn: Turn, ids: Ids, status: str) -> dict[str, Any]:
    if turn.refusal is not None:
        part: dict[str, Any] = {"type": "refusal", "refusal": turn.refusal}
    else:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}
    return {
        "id": ids.msg,
        "type": "message",
        "status": status,
        "content": [part],
        "role": "assistant",
    }


def call_item(turn: Turn, ids: Ids, i: int, final: bool) -> dict[str, Any]:
    call = turn.calls[i]
    status = ("completed" if call.complete else "incomplete") if final else "in_progress"
    return {
        "id": ids.items[i],
        "type": "function_call",
        "status": status,
        "arguments": call.arguments if final else "",
        "call_id": ids.calls[i],
        "name": call.name,
    }


def has_message(turn: Turn) -> bool:
    return bool(turn.text) or turn.refusal is not None or not turn.calls


def _output(turn: Turn, ids: Ids) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if has_message(turn):
        cut = turn.stop in ("max_tokens", "content_filter") and not turn.calls
        out.append(message_item(turn, ids, "incomplete" if cut else "completed"))
    out.extend(call_item(turn, ids, i, True) for i in range(len(turn.calls)))
    return out


def _status(turn: Turn) -> tuple[str, dict[str, str] | None]:
    if turn.stop == "max_tokens":
        return "incomplete", {"reason": "max_output_tokens"}
    if turn.stop == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def envelope(turn: Turn, body: dict[str, Any], ids: Ids, created: int) -> dict[str, Any]:
    echo = {k: body.get(k, _DEFAULTS[k]) for k in _ECHO}
    tools = [
        {"type": "function", "description": None, "strict": True, **t}
        for t in body.get("tools") or []
        if isinstance(t, dict)
    ]
    return {
        "id": ids.resp,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": echo["instructions"],
        "max_output_tokens": echo["max_output_tokens"],
        "max_tool_calls": None,
        "model": turn.model or body.get("model"),
        "output": [],
        "parallel_tool_calls": echo["parallel_tool_calls"],
        "previous_response_id": echo["previous_response_id"],
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": echo["store"],
        "temperature": echo["temperature"],
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": echo["tool_choice"],
        "tools": tools,
        "top_logprobs": 0,
        "top_p": echo["top_p"],
        "truncation": echo["truncation"],
        "usage": None,
        "user": None,
        "metadata": echo["metadata"],
    }


def _usage(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    i, o = input_tokens(body), output_tokens(turn)
    return {
        "input_tokens": i,
        "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o,
    }


def final_response(turn: Turn, body: dict[str, Any], ids: Ids, created: int) -> dict[str, Any]:
    resp = envelope(turn, body, ids, created)
    status, details = _status(turn)
    resp.update(
        status=status,
        incomplete_details=details,
        output=_output(turn, ids),
        usage=_usage(turn, body),
        completed_at=now_s() if status == "completed" else None,
    )
    return resp


def render_json(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    return final_response(turn, body, Ids(turn), now_s())


_RECORDED_STOP: dict[str | None, Stop] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}


def recorded_turn(raw: dict[str, Any]) -> Turn:
    """A recorded Responses body (what the ledger keeps of a turn) as the `Turn` it said."""
    text, refusal, calls = "", None, []
    for item in raw.get("output") or []:
        if item.get("type") == "function_call":
            complete = item.get("status") != "incomplete"
            calls.append(
                CallSpec(item["name"], item.get("arguments") or "", complete, item.get("call_id"))
            )
        elif item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "refusal":
                    refusal = part.get("refusal") or ""
                text += part.get("text") or ""
    cut = (raw.get("incomplete_details") or {}).get("reason")
    stop: Stop = _RECORDED_STOP.get(cut, "tool_calls" if calls else "end")
    if refusal is not None:
        stop = "refusal"
    return Turn(text=text, refusal=refusal, calls=tuple(calls), stop=stop)
