"""Which result the model received under which call id, read from the request bodies themselves.

The scripted model server logs every request body (``GET /_log``), so pairing is checked on
what was actually sent over the wire, not on what callgate believes it sent: a runtime that
appended results by position would put the right texts under the wrong call ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from callgate.ops.conformance.observation import ObservedCall


def result_pairs(api: str, body: Mapping[str, Any]) -> dict[str, str]:
    """Provider call id → result content, as the model received them in one request."""
    if api == "openai-responses":
        return {
            i["call_id"]: i["output"]
            for i in body["input"]
            if i.get("type") == "function_call_output"
        }
    if api == "openai-chat":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    return {
        b["tool_use_id"]: _text(b["content"])
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def _text(content: Any) -> str:
    """A tool_result's content: a string, or text blocks (both are valid Anthropic input)."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def told(result: Mapping[str, Any] | None) -> Any:
    """What the model must be told for a recorded result: the payload, or the error object."""
    if result is None:
        return None
    if result.get("status") == "ok":
        return result.get("payload")
    return {"error": result.get("error")}


def _parsed(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def pairing_problems(calls: Sequence[ObservedCall], sent: Mapping[str, str]) -> list[str]:
    """Every way ``sent`` (call id → content) differs from the calls' own results."""
    problems: list[str] = []
    wanted = {call.provider_call_id: call for call in calls}
    for call_id in sent:
        if call_id not in wanted:
            problems.append(f"a result was sent under {call_id}, which no call of the run has")
    for call_id, call in wanted.items():
        if call_id not in sent:
            problems.append(f"{call.tool} ({call_id}): no result was sent under its call id")
            continue
        got, want = _parsed(sent[call_id]), told(call.result)
        if got != want:
            problems.append(
                f"{call.tool} ({call_id}): the model got {_short(got)} under its call id, "
                f"but its result is {_short(want)}"
            )
    return problems


def _short(value: Any, limit: int = 80) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"
