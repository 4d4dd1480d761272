"""The providers' own history rules for tool calls, with their exact 400 error texts (pure).

Each `check_*` takes a request body and returns the first `Violation` in history order, or None.
Rule ids and texts follow tests/provider_fixtures/RULES.md:

* Responses R1 (call without output), R2 (output without call), R3 (reasoning item without its
  following item), R4 (duplicate item id), R5 (item id without its type's prefix). Choice made
  here: an output must come *after* its call (the real API's ordering rule is unrecorded).
* Chat C1 (assistant `tool_calls` not answered, `param` = index of that assistant message —
  the sdcb/chats recording has C1 at 57 and C2 at 59 for one broken group), C2 (tool message
  with no preceding `tool_calls`), C3 (unknown `tool_call_id`), with OpenAI's "preceeding".
* Anthropic A1–A6 on the *merged* message list: consecutive same-role messages are merged
  (a string content counts as one block), which is how the recorded A2 error reports
  `messages.0.content.1` for a tool_result sent in the second of two user messages. A4's exact
  text was never recorded; the one below is composed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    param: str | None = None
    code: str | None = None


_PREFIX = {"function_call": "fc", "reasoning": "rs", "message": "msg"}
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _dicts(seq: Any) -> list[dict[str, Any]]:
    return [x for x in seq if isinstance(x, dict)] if isinstance(seq, list) else []


# -- OpenAI Responses ----------------------------------------------------------------------


def check_responses(body: dict[str, Any]) -> Violation | None:
    items = _dicts(body.get("input"))
    seen: set[str] = set()
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for n, item in enumerate(items):
        kind = str(item.get("type", "message"))
        item_id = item.get("id")
        if isinstance(item_id, str):
            prefix = _PREFIX.get(kind)
            if prefix and not item_id.startswith(prefix):
                msg = (
                    f"Invalid 'input[{n}].id': '{item_id}'. "
                    f"Expected an ID that begins with '{prefix}'."
                )
                return Violation("R5", msg, f"input[{n}].id", "invalid_value")
            if item_id in seen:
                msg = (
                    f"Duplicate item found with id {item_id}. "
                    "Remove duplicate items from your input and try again."
                )
                return Violation("R4", msg, "input")
            seen.add(item_id)
        if kind == "reasoning" and _reasoning_orphaned(items, n):
            msg = (
                f"Item '{item_id}' of type 'reasoning' was provided "
                "without its required following item."
            )
            return Violation("R3", msg, "input")
        if kind == "function_call":
            calls.setdefault(str(item.get("call_id")), n)
        elif kind == "function_call_output":
            cid = str(item.get("call_id"))
            if cid not in calls:
                msg = f"No tool call found for function call output with call_id {cid}."
                return Violation("R2", msg, "input")
            answered.add(cid)
    for cid in calls:
        if cid not in answered:
            return Violation("R1", f"No tool output found for function call {cid}.", "input")
    return None


def _reasoning_orphaned(items: list[dict[str, Any]], n: int) -> bool:
    """A reasoning item must be followed by an assistant item (message, call, reasoning)."""
    if n + 1 >= len(items):
        return True
    nxt = items[n + 1]
    kind = nxt.get("type", "message")
    return kind == "function_call_output" or (kind == "message" and nxt.get("role") != "assistant")


# -- OpenAI Chat Completions ---------------------------------------------------------------

_C1 = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
_C2 = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
_C3 = "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."


def check_chat(body: dict[str, Any]) -> Violation | None:
    group: tuple[int, list[str]] | None = None  # (assistant index, ids still unanswered)
    group_ids: set[str] = set()
    messages = _dicts(body.get("messages"))
    for i, msg in enumerate([*messages, {"role": "__end__"}]):
        role = msg.get("role")
        if role == "tool":
            if group is None:
                return Violation("C2", _C2, f"messages.[{i}].role")
            cid = str(msg.get("tool_call_id"))
            if cid not in group_ids:
                return Violation("C3", _C3.format(id=cid), f"messages.[{i}].tool_call_id")
            if cid in group[1]:
                group[1].remove(cid)
            continue
        if group is not None and group[1]:
            ids = ", ".join(group[1])
            return Violation("C1", _C1.format(ids=ids), f"messages.[{group[0]}].role")
        group = None
        calls = _dicts(msg.get("tool_calls")) if role == "assistant" else []
        if calls:
            ids_list = [str(c.get("id")) for c in calls]
            group, group_ids = (i, list(dict.fromkeys(ids_list))), set(ids_list)
    return None


# -- Anthropic Messages --------------------------------------------------------------------

_A1 = (
    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
    "message."
)
_A2 = (
    "messages.{j}.content.{k}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
)
_A4 = (
    "messages.{j}.content.{k}: `tool_result` blocks must come first in the content of a user "
    "message that answers `tool_use` blocks; put any other content after them."
)


def merged_messages(body: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(role, blocks) with consecutive same-role messages merged, as the API indexes them."""
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    for msg in _dicts(body.get("messages")):
        content = msg.get("content")
        blocks = (
            [{"type": "text", "text": content}] if isinstance(content, str) else _dicts(content)
        )
        role = str(msg.get("role"))
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    return merged


def check_anthropic(body: dict[str, Any]) -> Violation | None:
    names = [str(t.get("name")) for t in _dicts(body.get("tools"))]
    if len(names) != len(set(names)):
        return Violation("A6", "tools: Tool names must be unique.")
    merged = merged_messages(body)
    seen: set[str] = set()
    for i, (role, blocks) in enumerate(merged):
        if role != "assistant":
            continue
        for k, b in enumerate(blocks):
            if b.get("type") != "tool_use":
                continue
            tid = b.get("id")
            if not isinstance(tid, str) or not _TOOL_ID.match(tid):
                msg = (
                    f"messages.{i}.content.{k}.tool_use.id: "
                    "String should match pattern '^[a-zA-Z0-9_-]+$'"
                )
                return Violation("A5", msg)
            if tid in seen:
                return Violation("A3", f"messages.{i}.content.{k}: tool_use ids must be unique")
            seen.add(tid)
    for i, (role, _) in enumerate(merged):
        found = _check_pairing(merged, i) if role == "user" else _check_answered(merged, i)
        if found is not None:
            return found
    return None


def _tool_use_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]


def _check_answered(merged: list[tuple[str, list[dict[str, Any]]]], i: int) -> Violation | None:
    """A1: every tool_use of assistant message i has a tool_result in message i+1."""
    wanted = _tool_use_ids(merged[i][1])
    if not wanted:
        return None
    nxt = merged[i + 1][1] if i + 1 < len(merged) else []
    got = {str(b.get("tool_use_id")) for b in nxt if b.get("type") == "tool_result"}
    missing = [t for t in wanted if t not in got]
    if missing:
        return Violation("A1", _A1.format(i=i, ids=", ".join(missing)))
    return None


def _check_pairing(merged: list[tuple[str, list[dict[str, Any]]]], j: int) -> Violation | None:
    """A4 (results first) and A2 (each result answers a tool_use of message j-1)."""
    blocks = merged[j][1]
    results = [k for k, b in enumerate(blocks) if b.get("type") == "tool_result"]
    if not results:
        return None
    prev = merged[j - 1] if j > 0 else ("user", [])
    known = set(_tool_use_ids(prev[1])) if prev[0] == "assistant" else set()
    bad = [k for k in results if str(blocks[k].get("tool_use_id")) not in known]
    if bad:
        ids = ", ".join(str(blocks[k].get("tool_use_id")) for k in bad)
        return Violation("A2", _A2.format(j=j, k=bad[0], ids=ids))
    other = [k for k, b in enumerate(blocks) if b.get("type") != "tool_result"]
    if other and other[0] < results[-1]:
        return Violation("A4", _A4.format(j=j, k=other[0]))
    return None
