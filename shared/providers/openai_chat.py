"""OpenAI Chat Completions (`POST /v1/chat/completions`): `tool_calls` paired with `tool`
messages by `tool_call_id`.

In a stream, `id` and `function.name` come only in the first delta of each
`tool_calls[].index`; later deltas carry argument fragments for that index, possibly
interleaved with other indexes.  The stream is done at the chunk carrying
`finish_reason` (the usage chunk and `[DONE]` follow).
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
from callgate.providers.common import CallCandidate, build_calls, join_fragments, sdk_arguments
from callgate.providers.openai_common import OpenAIAdapter

API = "openai-chat"

INCOMPLETE_FINISH: dict[str, IncompleteReason] = {
    "length": "max_tokens",
    "content_filter": "content_filter",
    "function_call": "other",  # the legacy functions API, which we never request
}
# With a forced tool_choice the API reports "stop" although the message has tool_calls.
CALL_FINISH = frozenset({"tool_calls", "stop"})


def to_provider(turn: TurnInput, *, stream: bool) -> JsonDict:
    """The `chat.completions.create` arguments; instructions become a leading system
    message at request time, so the stored history never holds them."""
    system = [{"role": "system", "content": turn.instructions}] if turn.instructions else []
    request: JsonDict = {"model": turn.model, "messages": system + turn.history, "stream": stream}
    if stream:
        request["stream_options"] = {"include_usage": True}
    if turn.tools:
        request["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in turn.tools
        ]
    if turn.max_output_tokens is not None:
        request["max_completion_tokens"] = turn.max_output_tokens
    return request


def _call_candidate(tool_call: JsonDict) -> CallCandidate:
    function = tool_call.get("function") or {}
    return CallCandidate(
        tool_call.get("id"), function.get("name"), str(function.get("arguments") or ""), tool_call
    )


def from_provider(response: JsonDict) -> tuple[TurnEvent, list[JsonDict]]:
    """Classify a complete chat completion (non-stream body or assembled from chunks)."""
    choices = response.get("choices") or []
    if not choices:
        return Incomplete(reason="other", detail="no choices"), []
    finish = choices[0].get("finish_reason")
    message: JsonDict = choices[0].get("message") or {}
    content = message.get("content")
    tool_calls: list[JsonDict] = message.get("tool_calls") or []
    if finish in INCOMPLETE_FINISH:
        return Incomplete(reason=INCOMPLETE_FINISH[finish], detail=f"finish_reason {finish}"), []
    if tool_calls and finish in CALL_FINISH:
        calls = build_calls(_call_candidate(tc) for tc in tool_calls)
        if isinstance(calls, Incomplete):
            return calls, []
        item = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [
                {
                    "id": c.provider_call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in calls
            ],
        }
        return ToolRequests(calls=calls, text=content or None), [item]
    if finish != "stop":
        return Incomplete(reason="other", detail=f"finish_reason {finish!r}"), []
    refusal = message.get("refusal")
    if refusal:
        return Refused(message=str(refusal)), [{"role": "assistant", "content": str(refusal)}]
    text = str(content or "")
    return FinalAnswer(text=text), [{"role": "assistant", "content": text}]


class ChatStream:
    """Collects chunk deltas of choice 0, tool calls by `index`, until `finish_reason`."""

    def __init__(self) -> None:
        self.envelope: JsonDict = {}
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, JsonDict] = {}
        self.arguments: dict[int, list[str]] = {}
        self.finish_reason: str | None = None
        self.usage: JsonDict | None = None
        self.problem: Incomplete | None = None

    def feed(self, chunk: JsonDict) -> None:
        if not self.envelope:
            self.envelope = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(str(delta["content"]))
            if delta.get("refusal"):
                self.refusal.append(str(delta["refusal"]))
            for fragment in delta.get("tool_calls") or []:
                self._add_fragment(fragment)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _add_fragment(self, fragment: JsonDict) -> None:
        index = int(fragment.get("index") or 0)
        call = self.calls.setdefault(index, {"id": None, "type": "function", "name": None})
        function = fragment.get("function") or {}
        # Some servers repeat id/name in every delta; a *different* id is a protocol error.
        if fragment.get("id") and call["id"] not in (None, fragment["id"]):
            self.problem = Incomplete(reason="other", detail=f"call index {index} changed id")
        call["id"] = call["id"] or fragment.get("id")
        call["name"] = call["name"] or function.get("name")
        self.arguments.setdefault(index, []).append(str(function.get("arguments") or ""))

    def finish(self) -> tuple[JsonDict, TurnEvent | None]:
        """The completion as assembled, and what the stream itself says is wrong, if anything."""
        message: JsonDict = {
            "role": "assistant",
            "content": join_fragments(self.content) if self.content else None,
            "refusal": join_fragments(self.refusal) if self.refusal else None,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": c["type"],
                    "function": {
                        "name": c["name"],
                        "arguments": join_fragments(self.arguments.get(i, [])),
                    },
                }
                for i, c in sorted(self.calls.items())
            ]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        response = {**self.envelope, "object": "chat.completion", "choices": [choice]}
        if self.usage is not None:
            response["usage"] = self.usage
        if self.finish_reason is None:
            return response, Incomplete(reason="stream_ended", detail="no finish_reason")
        return response, self.problem


class OpenAIChatAdapter(OpenAIAdapter[ChatStream]):
    """`ProviderAdapter` for Chat Completions; streams unless `stream=False`."""

    api = API
    usage_fields = ("prompt_tokens", "completion_tokens")
    assembler = ChatStream
    to_provider = staticmethod(to_provider)
    from_provider = staticmethod(from_provider)

    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        return [
            {"role": "tool", "tool_call_id": r.provider_call_id, "content": r.content}
            for r in results
        ]

    async def _create(self, request: JsonDict, timeout_s: float) -> Any:
        return await self.client.chat.completions.create(
            **sdk_arguments(request, {"messages": []}), timeout=timeout_s
        )
