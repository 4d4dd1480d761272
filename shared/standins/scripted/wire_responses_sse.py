"""OpenAI Responses SSE: a `Turn` as the event list the real stream carries.

Order (what the SDK's `responses.stream()` helper enforces): response.created, in_progress;
per output item: output_item.added → (content_part.added) → deltas → (…done) →
output_item.done; then exactly one terminal event (completed | incomplete), or — for a
mid-stream failure — the recorded nested `error` event then `response.failed`. Every event gets
`sequence_number` 0,1,2,…; deltas carry the wire's `obfuscation` padding. A function call cut by
`max_output_tokens` (no recording exists) gets no `function_call_arguments.done` and an
`output_item.done` with item `status: incomplete`, then `response.incomplete`.
"""

from __future__ import annotations

from typing import Any

from callgate.standins.scripted import openai_errors
from callgate.standins.scripted.common import (
    SSE,
    Turn,
    arg_fragments,
    interleave,
    now_s,
    rand_alnum,
    sequential,
    text_fragments,
)
from callgate.standins.scripted.wire_responses import (
    Ids,
    call_item,
    envelope,
    final_response,
    has_message,
    message_item,
)


def _obf() -> str:
    return rand_alnum(12)


def _message_events(turn: Turn, ids: Ids, status: str) -> list[dict[str, Any]]:
    refusal = turn.refusal is not None
    full = message_item(turn, ids, status)
    empty = (
        {"type": "refusal", "refusal": ""}
        if refusal
        else {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    )
    at = {"item_id": ids.msg, "output_index": 0, "content_index": 0}
    evs: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**full, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": empty},
    ]
    if refusal:
        evs += [
            {"type": "response.refusal.delta", **at, "delta": d}
            for d in text_fragments(turn.refusal or "")
        ]
        evs.append({"type": "response.refusal.done", **at, "refusal": turn.refusal})
    else:
        evs += [
            {
                "type": "response.output_text.delta",
                **at,
                "delta": d,
                "logprobs": [],
                "obfuscation": _obf(),
            }
            for d in text_fragments(turn.text)
        ]
        evs.append({"type": "response.output_text.done", **at, "text": turn.text, "logprobs": []})
    evs.append({"type": "response.content_part.done", **at, "part": full["content"][0]})
    evs.append({"type": "response.output_item.done", "output_index": 0, "item": full})
    return evs


def _call_events(turn: Turn, ids: Ids, base: int) -> list[dict[str, Any]]:
    n = len(turn.calls)
    added = [
        {
            "type": "response.output_item.added",
            "output_index": base + i,
            "item": call_item(turn, ids, i, False),
        }
        for i in range(n)
    ]
    frags = [arg_fragments(c.arguments, one_char=turn.char_fragments) for c in turn.calls]
    order = interleave(frags) if turn.interleave else sequential(frags)
    deltas = [
        {
            "type": "response.function_call_arguments.delta",
            "item_id": ids.items[i],
            "output_index": base + i,
            "delta": d,
            "obfuscation": _obf(),
        }
        for i, d in order
    ]
    done: list[list[dict[str, Any]]] = []
    for i, call in enumerate(turn.calls):
        ends = (
            []
            if not call.complete
            else [
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": ids.items[i],
                    "output_index": base + i,
                    "arguments": call.arguments,
                }
            ]
        )
        ends.append(
            {
                "type": "response.output_item.done",
                "output_index": base + i,
                "item": call_item(turn, ids, i, True),
            }
        )
        done.append(ends)
    if turn.interleave:
        return [*added, *deltas, *(e for ends in done for e in ends)]
    own = [[e for e in deltas if e["output_index"] == base + i] for i in range(n)]
    return [e for i in range(n) for e in [added[i], *own[i], *done[i]]]


def render_stream(turn: Turn, body: dict[str, Any], error_after: int | None) -> list[SSE]:
    """The full event list; with `error_after`, the first N events then error + failed."""
    ids, created = Ids(turn), now_s()
    start = envelope(turn, body, ids, created)
    evs: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    base = 0
    if has_message(turn):
        cut = turn.stop in ("max_tokens", "content_filter") and not turn.calls
        evs += _message_events(turn, ids, "incomplete" if cut else "completed")
        base = 1
    evs += _call_events(turn, ids, base)
    final = final_response(turn, body, ids, created)
    terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
    evs.append({"type": terminal, "response": final})
    if error_after is not None:
        evs = evs[:error_after] + _failure(start)
    return [SSE(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(evs)]


def _failure(start: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded failing tail: nested `error` event (SDK raises APIError), response.failed."""
    err = openai_errors.stream_error_payload()
    failed = {
        **start,
        "status": "failed",
        "error": {"code": "server_error", "message": err["message"]},
    }
    return [{"type": "error", "error": err}, {"type": "response.failed", "response": failed}]
