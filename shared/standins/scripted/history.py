"""What the conversation so far looks like, read from each protocol's request body.

Step selection needs only a protocol-neutral summary: how many assistant turns were already
taken, which tool results are present (by tool name, in history order) and the latest user text.
Pairing a result to its tool name goes through the provider's own key (`call_id`,
`tool_call_id`, `tool_use_id`). Malformed histories are the rules module's business; here
anything unexpected is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    content: str


@dataclass(frozen=True)
class Conversation:
    assistant_turns: int
    results: tuple[ToolResult, ...]
    last_user_text: str

    def results_named(self, name: str) -> list[ToolResult]:
        return [r for r in self.results if r.name == name]


def flatten(content: Any) -> str:
    """Text of a string or a list of content parts/blocks (`text` of each part, joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return ""


def _count_runs(flags: list[bool]) -> int:
    """Number of maximal runs of True (consecutive assistant items form one turn)."""
    return sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))


class _Reading:
    """What a reader collects from a history: tool results paired with their tool names
    through the provider's call key, and the last user text."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.results: list[ToolResult] = []
        self.last_user = ""

    def call(self, call_id: Any, name: Any) -> None:
        self.names[str(call_id)] = str(name)

    def result(self, call_id: Any, content: Any) -> None:
        cid = str(call_id)
        self.results.append(ToolResult(cid, self.names.get(cid, ""), flatten(content)))

    def user(self, text: str) -> None:
        self.last_user = text

    def conversation(self, assistant_flags: list[bool]) -> Conversation:
        return Conversation(_count_runs(assistant_flags), tuple(self.results), self.last_user)


def from_responses(body: dict[str, Any]) -> Conversation:
    raw = body.get("input")
    if isinstance(raw, str):
        return Conversation(0, (), raw)
    items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []
    reading = _Reading()
    flags: list[bool] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            reading.call(item.get("call_id"), item.get("name"))
        elif kind == "function_call_output":
            reading.result(item.get("call_id"), item.get("output"))
        elif kind == "message" and item.get("role") == "user":
            reading.user(flatten(item.get("content")))
        assistant = kind in ("function_call", "reasoning") or (
            kind == "message" and item.get("role") == "assistant"
        )
        flags.append(assistant)
    return reading.conversation(flags)


def from_chat(body: dict[str, Any]) -> Conversation:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    reading = _Reading()
    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                reading.call(call.get("id"), fn.get("name"))
        elif role == "tool":
            reading.result(msg.get("tool_call_id"), msg.get("content"))
        elif role == "user":
            reading.user(flatten(msg.get("content")))
    return reading.conversation([m.get("role") == "assistant" for m in messages])


def from_anthropic(body: dict[str, Any]) -> Conversation:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    reading = _Reading()
    for msg in messages:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        if msg.get("role") == "assistant":
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    reading.call(b.get("id"), b.get("name"))
            continue
        texts = [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        if isinstance(content, str) or texts:
            reading.user(content if isinstance(content, str) else flatten(texts))
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                reading.result(b.get("tool_use_id"), b.get("content"))
    return reading.conversation([m.get("role") == "assistant" for m in messages])
