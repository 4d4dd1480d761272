"""OpenAI Responses API (`POST /v1/responses`): `function_call` items paired by `call_id`.

There is no finish_reason: `status` says whether the response is usable and the output
items say what it is.  A stream is done only at `response.completed` /
`response.incomplete` / `response.failed`; an `error` event fails the request.
"""

from __future__ import annotations

from typing import Any

from callgate.providers.base import (
    FinalAnswer,
    Incomplete,
    IncompleteReason,
    JsonDict,
    Refused,
    ToolRequests,
    ToolResultInput,
    TurnEvent,
    TurnInput,
)
from callgate.providers.common import (
    CallCandidate,
    build_calls,
    drop_none,
    join_fragments,
    sdk_arguments,
    to_failed,
)
from callgate.providers.openai_common import OpenAIAdapter, error_from_body

API = "openai-responses"

INCOMPLETE_REASONS: dict[str, IncompleteReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "content_filter",
}
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def to_provider(turn: TurnInput, *, stream: bool) -> JsonDict:
    """The `responses.create` arguments; the whole history is sent (no previous_response_id,
    so replayed items never collide with stored ones, RULES R4)."""
    request: JsonDict = {"model": turn.model, "input": turn.history, "stream": stream}
    if turn.tools:
        request["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": False,
            }
            for t in turn.tools
        ]
    if turn.instructions is not None:
        request["instructions"] = turn.instructions
    if turn.max_output_tokens is not None:
        request["max_output_tokens"] = turn.max_output_tokens
    return request


def replay_item(item: JsonDict) -> JsonDict:
    """An output item as an input item.  A function_call goes back without `id` and
    `status` (`call_id` alone pairs it with its output, RULES R5); the rest as returned."""
    if item.get("type") == "function_call":
        return {k: item[k] for k in ("type", "call_id", "name", "arguments") if k in item}
    if item.get("type") == "reasoning":
        return drop_none({k: v for k, v in item.items() if k != "status"})
    return drop_none(item)


def _message_parts(output: list[JsonDict]) -> tuple[str, str | None]:
    texts: list[str] = []
    refusals: list[str] = []
    for item in output:
        if item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                texts.append(str(part.get("text") or ""))
            elif part.get("type") == "refusal":
                refusals.append(str(part.get("refusal") or ""))
    return "".join(texts), ("".join(refusals) if refusals else None)


def from_provider(response: JsonDict) -> tuple[TurnEvent, list[JsonDict]]:
    """Classify a complete response (non-stream body or the terminal event's response)."""
    status = response.get("status")
    if status == "failed":
        error = response.get("error")
        return to_failed(error_from_body(error, f"response failed: {error!r}")), []
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        mapped = INCOMPLETE_REASONS.get(str(reason), "other")
        return Incomplete(reason=mapped, detail=f"incomplete: {reason}"), []
    if status != "completed":
        return Incomplete(reason="other", detail=f"response status {status!r}"), []
    output: list[JsonDict] = list(response.get("output") or [])
    text, refusal = _message_parts(output)
    items = [replay_item(i) for i in output]
    function_calls = [i for i in output if i.get("type") == "function_call"]
    if function_calls:
        unfinished = [i for i in function_calls if i.get("status") not in (None, "completed")]
        if unfinished:
            return Incomplete(reason="other", detail=f"call status {unfinished[0]['status']}"), []
        calls = build_calls(
            CallCandidate(i.get("call_id"), i.get("name"), str(i.get("arguments") or ""), i)
            for i in function_calls
        )
        if isinstance(calls, Incomplete):
            return calls, []
        return ToolRequests(calls=calls, text=text or None), items
    if refusal is not None:
        return Refused(message=refusal or "refused"), items
    return FinalAnswer(text=text), items


class ResponsesStream:
    """Collects stream events by `output_index` until a terminal event."""

    def __init__(self) -> None:
        self.response: JsonDict = {}
        self.items: dict[int, JsonDict] = {}
        self.arguments: dict[int, list[str]] = {}
        self.done: set[int] = set()
        self.terminal = False
        self.error: JsonDict | None = None

    def feed(self, event: JsonDict) -> None:
        kind = event.get("type")
        index = event.get("output_index")
        if kind in TERMINAL_EVENTS or kind in ("response.created", "response.in_progress"):
            self.response = dict(event.get("response") or {})
            self.terminal = self.terminal or kind in TERMINAL_EVENTS
        elif kind == "response.output_item.added" and isinstance(index, int):
            self.items[index] = dict(event.get("item") or {})
        elif kind == "response.function_call_arguments.delta" and isinstance(index, int):
            self.arguments.setdefault(index, []).append(str(event.get("delta") or ""))
        elif kind == "response.output_item.done" and isinstance(index, int):
            self.items[index] = dict(event.get("item") or {})
            self.done.add(index)
        elif kind == "error":
            self.error = event  # the flat (spec) shape; the nested one raises in the SDK

    def _item(self, index: int) -> JsonDict:
        item = dict(self.items[index])
        if item.get("type") == "function_call" and not item.get("arguments"):
            item["arguments"] = join_fragments(self.arguments.get(index, []))
        return item

    def finish(self) -> tuple[JsonDict, TurnEvent | None]:
        """The response as assembled, and what the stream itself says is wrong, if anything."""
        response = dict(self.response)
        if not response.get("output") and self.items:
            response["output"] = [self._item(i) for i in sorted(self.items)]
        if self.error is not None:
            return response, to_failed(error_from_body(self.error, "error event", status=200))
        if not self.terminal:
            return response, Incomplete(reason="stream_ended", detail="no terminal event")
        # An item counts as finished if it was `done` or the terminal response lists it.
        final_ids = {o.get("id") for o in self.response.get("output") or []}
        unfinished = [i for i in self.items if i not in self.done]
        if any(self.items[i].get("id") not in final_ids for i in unfinished):
            return response, Incomplete(reason="stream_ended", detail="item never done")
        return response, None


class OpenAIResponsesAdapter(OpenAIAdapter[ResponsesStream]):
    """`ProviderAdapter` for the Responses API; streams unless `stream=False`."""

    api = API
    usage_fields = ("input_tokens", "output_tokens")
    assembler = ResponsesStream
    to_provider = staticmethod(to_provider)
    from_provider = staticmethod(from_provider)

    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        return [
            {"type": "function_call_output", "call_id": r.provider_call_id, "output": r.content}
            for r in results
        ]

    async def _create(self, request: JsonDict, timeout_s: float) -> Any:
        return await self.client.responses.create(**sdk_arguments(request), timeout=timeout_s)
