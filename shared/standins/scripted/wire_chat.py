"""OpenAI Chat Completions (`POST /v1/chat/completions`): a `Turn` as JSON or as SSE chunks.

Shapes follow tests/provider_fixtures/openai-chat: data-only frames; the first chunk carries the
role; a tool call's `id`, `type` and `function.name` appear only in the first delta of its `index`,
later deltas carry `index` + `function.arguments`; an empty-delta chunk carries
`finish_reason`; with `stream_options.include_usage` a `choices: []` chunk carries `usage`;
then `data: [DONE]`. A mid-stream failure is a `data: {"error": {...}}` chunk (the SDK raises
`openai.APIError` on any chunk with a top-level `error`) and no `[DONE]`.
"""

from __future__ import annotations

from typing import Any

from callgate.standins.scripted import openai_errors
from callgate.standins.scripted.common import (
    SSE,
    ApiError,
    CallSpec,
    Stop,
    Turn,
    arg_fragments,
    call_ids,
    input_tokens,
    interleave,
    now_s,
    output_tokens,
    rand_alnum,
    rand_hex,
    sequential,
    text_fragments,
)

FINISH = {
    "end": "stop",
    "tool_calls": "tool_calls",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "stop",
}


def validate(body: dict[str, Any]) -> ApiError | None:
    if not isinstance(body.get("model"), str):
        return openai_errors.error(400, "you must provide a model parameter")
    if not isinstance(body.get("messages"), list):
        return openai_errors.missing_parameter("messages")
    return None


def not_found(model: str) -> ApiError:
    msg = f"The model `{model}` does not exist or you do not have access to it."
    return openai_errors.error(404, msg, code="model_not_found")


def _call_ids(turn: Turn) -> list[str | None]:
    return call_ids(turn, lambda: f"call_{rand_alnum(24)}", missing=None)


def _usage(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    i, o = input_tokens(body), output_tokens(turn)
    return {
        "prompt_tokens": i,
        "completion_tokens": o,
        "total_tokens": i + o,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class _Meta:
    def __init__(self, turn: Turn, body: dict[str, Any]) -> None:
        self.id = f"chatcmpl-{rand_alnum(29)}"
        self.created = now_s()
        self.model = turn.model or str(body.get("model"))
        self.fingerprint = f"fp_{rand_hex(10)}"


def render_json(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    meta = _Meta(turn, body)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.text or None,
        "refusal": turn.refusal,
        "annotations": [],
    }
    if turn.calls:
        message["tool_calls"] = [
            {
                "id": cid or "",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for cid, c in zip(_call_ids(turn), turn.calls, strict=True)
        ]
    return {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": FINISH[turn.stop]}
        ],
        "usage": _usage(turn, body),
        "service_tier": "default",
        "system_fingerprint": meta.fingerprint,
    }


def _chunk(meta: _Meta, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": meta.fingerprint,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _tool_deltas(turn: Turn) -> list[dict[str, Any]]:
    frags = [arg_fragments(c.arguments, one_char=turn.char_fragments) for c in turn.calls]
    order = interleave(frags) if turn.interleave else sequential(frags)
    ids, started = _call_ids(turn), set[int]()
    out: list[dict[str, Any]] = []
    # a call with empty arguments still needs its header delta
    pending = [(i, "") for i, f in enumerate(frags) if not f]
    for i, piece in [*pending, *order]:
        if i not in started:
            started.add(i)
            head: dict[str, Any] = {"index": i}
            if ids[i] is not None:
                head["id"] = ids[i]
            head.update(type="function", function={"name": turn.calls[i].name, "arguments": ""})
            out.append({"tool_calls": [head]})
        if piece:
            out.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    return out


def _deltas(turn: Turn) -> list[dict[str, Any]]:
    if turn.refusal is not None:
        first: dict[str, Any] = {"role": "assistant", "content": None, "refusal": ""}
        return [first, *({"refusal": d} for d in text_fragments(turn.refusal))]
    if turn.text or not turn.calls:
        first = {"role": "assistant", "content": "", "refusal": None}
        out = [first, *({"content": d} for d in text_fragments(turn.text))]
    else:
        out = [{"role": "assistant", "content": None}]
    return out + _tool_deltas(turn)


def render_stream(turn: Turn, body: dict[str, Any], error_after: int | None) -> list[SSE]:
    """The chunk list; with `error_after`, the first N chunks then one error chunk."""
    meta = _Meta(turn, body)
    chunks = [_chunk(meta, d) for d in _deltas(turn)]
    chunks.append(_chunk(meta, {}, FINISH[turn.stop]))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = _chunk(meta, {})
        usage.update(choices=[], usage=_usage(turn, body))
        chunks.append(usage)
    if error_after is not None:
        failing = [*chunks[:error_after], {"error": openai_errors.stream_error_payload()}]
        return [SSE(None, c) for c in failing]
    return [*(SSE(None, c) for c in chunks), SSE(None, "[DONE]")]


_RECORDED_STOP: dict[str | None, Stop] = {
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def recorded_turn(raw: dict[str, Any]) -> Turn:
    """A recorded Chat Completions body (what the ledger keeps of a turn) as its `Turn`."""
    choice = (raw.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    stop: Stop | None = _RECORDED_STOP.get(choice.get("finish_reason"))
    calls = [
        CallSpec(
            c["function"]["name"], c["function"].get("arguments") or "", True, c.get("id") or None
        )
        for c in message.get("tool_calls") or []
    ]
    if stop == "max_tokens" and calls:
        calls[-1] = CallSpec(calls[-1].name, calls[-1].arguments, False, calls[-1].call_id)
    refusal = message.get("refusal")
    if refusal is not None:
        stop = "refusal"
    return Turn(
        text=message.get("content") or "",
        refusal=refusal,
        calls=tuple(calls),
        stop=stop or ("tool_calls" if calls else "end"),
    )
