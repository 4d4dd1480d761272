"""The scripted model server through the official SDKs (openai 3.57, anthropic 2.16), over HTTP.

Every protocol × fault is served on a real loopback socket and read back with
`AsyncOpenAI` / `AsyncAnthropic` (`max_retries=0`), streaming and not; raw SSE streams are
validated event by event against the SDKs' pydantic types and the Responses ordering rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse as AnthropicErrorResponse
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from openai.types.shared import ErrorObject as OpenAIErrorObject

from callgate.standins.scripted_model import DEFAULT_SCENARIOS, ScriptedModelServer

PROTOCOLS = ["responses", "chat", "anthropic"]
CITY = "Zürich → 東京 🚆"
ARGS = {"city": CITY, "days": 3}
TWO_CALLS = [
    {"name": "get_weather", "arguments": {"city": CITY}},
    {"name": "get_time", "arguments": {"zone": "Europe/Zurich"}},
]


def scenario(step: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    return {"steps": [step, *more]}


_OPEN: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []


@pytest.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer(DEFAULT_SCENARIOS) as s:
        try:
            yield s
        finally:  # close SDK clients inside the loop, not at garbage collection
            while _OPEN:
                await _OPEN.pop().close()


def oai(s: ScriptedModelServer, **kw: Any) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="sk-test", max_retries=0, **kw)
    _OPEN.append(client)
    return client


def ant(s: ScriptedModelServer, **kw: Any) -> anthropic.AsyncAnthropic:
    client = anthropic.AsyncAnthropic(
        base_url=s.anthropic_base_url, api_key="sk-ant-test", max_retries=0, **kw
    )
    _OPEN.append(client)
    return client


# -- a tiny neutral reader per protocol (tests only; the real adapters live in shared/) ----


@dataclass
class Got:
    text: str = ""
    refusal: str | None = None
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # index → id, name, args
    stop: str | None = None
    events: list[str] = field(default_factory=list)

    def args(self) -> list[str]:
        return [self.calls[i]["args"] for i in sorted(self.calls)]


def first_request(proto: str, model: str, user: str = "hi") -> dict[str, Any]:
    if proto == "responses":
        return {"model": model, "input": [{"role": "user", "content": user}]}
    if proto == "chat":
        return {"model": model, "messages": [{"role": "user", "content": user}]}
    return {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": user}]}


async def ask(s: ScriptedModelServer, proto: str, req: dict[str, Any], stream: bool) -> Got:
    if proto == "responses":
        return await _responses(oai(s), req, stream)
    if proto == "chat":
        return await _chat(oai(s), req, stream)
    return await _anthropic(ant(s), req, stream)


async def _responses(c: openai.AsyncOpenAI, req: dict[str, Any], stream: bool) -> Got:
    got = Got()
    if not stream:
        r = await c.responses.create(**req)
        got.stop = r.status if r.incomplete_details is None else r.incomplete_details.reason
        for i, item in enumerate(r.output):
            if item.type == "function_call":
                got.calls[i] = {"id": item.call_id, "name": item.name, "args": item.arguments}
            elif item.type == "message":
                for part in item.content:
                    if part.type == "refusal":
                        got.refusal = part.refusal
                    else:
                        got.text += part.text
        return got
    async for e in await c.responses.create(**req, stream=True):
        got.events.append(e.type)
        if e.type == "response.output_item.added" and e.item.type == "function_call":
            got.calls[e.output_index] = {"id": e.item.call_id, "name": e.item.name, "args": ""}
        elif e.type == "response.function_call_arguments.delta":
            got.calls[e.output_index]["args"] += e.delta
        elif e.type == "response.output_text.delta":
            got.text += e.delta
        elif e.type == "response.refusal.delta":
            got.refusal = (got.refusal or "") + e.delta
        elif e.type in ("response.completed", "response.incomplete"):
            details = e.response.incomplete_details
            got.stop = e.response.status if details is None else details.reason
    return got


async def _chat(c: openai.AsyncOpenAI, req: dict[str, Any], stream: bool) -> Got:
    got = Got()
    if not stream:
        r = await c.chat.completions.create(**req)
        msg, got.stop = r.choices[0].message, r.choices[0].finish_reason
        got.text, got.refusal = msg.content or "", msg.refusal
        for i, tc in enumerate(msg.tool_calls or []):
            assert tc.type == "function"
            got.calls[i] = {"id": tc.id, "name": tc.function.name, "args": tc.function.arguments}
        return got
    opts = {"stream_options": {"include_usage": True}}
    async for chunk in await c.chat.completions.create(**req, **opts, stream=True):
        got.events.append("usage" if not chunk.choices else "chunk")
        for ch in chunk.choices:
            got.stop = ch.finish_reason or got.stop
            got.text += ch.delta.content or ""
            if ch.delta.refusal:
                got.refusal = (got.refusal or "") + ch.delta.refusal
            for tc in ch.delta.tool_calls or []:
                slot = got.calls.setdefault(tc.index, {"id": tc.id, "name": None, "args": ""})
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                slot["args"] += (tc.function.arguments or "") if tc.function else ""
    return got


async def _anthropic(c: anthropic.AsyncAnthropic, req: dict[str, Any], stream: bool) -> Got:
    got = Got()
    if not stream:
        m = await c.messages.create(**req)
        got.stop = m.stop_reason
        for i, b in enumerate(m.content):
            if b.type == "text":
                got.text += b.text
            elif b.type == "tool_use":
                got.calls[i] = {"id": b.id, "name": b.name, "args": json.dumps(b.input)}
        return got
    async for e in await c.messages.create(**req, stream=True):
        got.events.append(e.type)
        if e.type == "content_block_start" and e.content_block.type == "tool_use":
            got.calls[e.index] = {"id": e.content_block.id, "name": e.content_block.name}
            got.calls[e.index]["args"] = ""
        elif e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            got.calls[e.index]["args"] += e.delta.partial_json
        elif e.type == "content_block_delta" and e.delta.type == "text_delta":
            got.text += e.delta.text
        elif e.type == "message_delta":
            got.stop = e.delta.stop_reason
    return got


def follow_up(proto: str, req: dict[str, Any], got: Got, results: dict[str, str]) -> dict[str, Any]:
    """The next request: the assistant turn re-sent in the API's shape plus one result per call."""
    calls = [got.calls[i] for i in sorted(got.calls)]
    nxt = json.loads(json.dumps(req))
    if proto == "responses":
        nxt["input"] += [
            {"type": "function_call", "call_id": c["id"], "name": c["name"], "arguments": c["args"]}
            for c in calls
        ] + [
            {"type": "function_call_output", "call_id": c["id"], "output": results[c["name"]]}
            for c in calls
        ]
    elif proto == "chat":
        tool_calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["args"]},
            }
            for c in calls
        ]
        nxt["messages"].append(
            {"role": "assistant", "content": got.text or None, "tool_calls": tool_calls}
        )
        nxt["messages"] += [
            {"role": "tool", "tool_call_id": c["id"], "content": results[c["name"]]} for c in calls
        ]
    else:
        content: list[dict[str, Any]] = [{"type": "text", "text": got.text}] if got.text else []
        content += [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": json.loads(c["args"])}
            for c in calls
        ]
        nxt["messages"].append({"role": "assistant", "content": content})
        nxt["messages"].append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": results[c["name"]]}
                    for c in calls
                ],
            }
        )
    return nxt


# -- raw SSE + strict type validation -------------------------------------------------------


def _members(union: Any) -> dict[str, type[pydantic.BaseModel]]:
    args = typing.get_args(union)
    inner = typing.get_args(args[0]) if typing.get_origin(args[0]) is typing.Union else args
    return {typing.get_args(m.model_fields["type"].annotation)[0]: m for m in inner}


RESPONSE_EVENTS = _members(ResponseStreamEvent)
ANTHROPIC_EVENTS = _members(RawMessageStreamEvent)
PATHS = {"responses": "/v1/responses", "chat": "/v1/chat/completions", "anthropic": "/v1/messages"}


WIRE_ONLY = {"obfuscation", "store", "recommended_model"}


def _extras(model: Any, where: str = "") -> list[str]:
    """Fields the SDK type does not know (a typo on our side), except two the real wire sends
    the SDKs do not model: delta `obfuscation`, Responses `store`, Anthropic refusal
    `stop_details.recommended_model` (all in the recorded fixtures)."""
    found: list[str] = []
    if isinstance(model, pydantic.BaseModel):
        found += [f"{where}.{k}" for k in (model.model_extra or {}) if k not in WIRE_ONLY]
        for name in type(model).model_fields:
            found += _extras(getattr(model, name), f"{where}.{name}")
    elif isinstance(model, list):
        for i, v in enumerate(model):
            found += _extras(v, f"{where}[{i}]")
    return found


async def raw_sse(
    s: ScriptedModelServer, proto: str, req: dict[str, Any]
) -> list[tuple[str | None, str]]:
    async with httpx2.AsyncClient(base_url=s.base_url) as http:
        extra = {"stream_options": {"include_usage": True}} if proto == "chat" else {}
        r = await http.post(PATHS[proto], json={**req, **extra, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    frames = []
    for block in r.text.split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        frames.append((lines.get("event"), lines["data"]))
    return frames


def validate_stream(proto: str, frames: list[tuple[str | None, str]]) -> list[Any]:
    """Each `data:` payload against its SDK type; `event:` line == payload type.

    Error payloads (which the SDKs raise on instead of parsing) are checked as the SDKs' error
    objects: openai `ErrorObject`, anthropic `ErrorResponse`."""
    out: list[Any] = []
    for event, data in frames:
        if data == "[DONE]":
            assert proto == "chat" and event is None
            out.append("[DONE]")
            continue
        payload = json.loads(data)
        if proto == "chat":
            assert event is None
        else:
            assert event == payload["type"]
        obj: Any
        if proto != "anthropic" and "error" in payload:
            obj = OpenAIErrorObject.model_validate(payload["error"])
        elif proto == "chat":
            obj = ChatCompletionChunk.model_validate(payload)
        elif payload["type"] == "error":
            obj = AnthropicErrorResponse.model_validate(payload)
        elif payload["type"] == "ping":
            assert payload == {"type": "ping"}
            obj = payload
        else:
            table = RESPONSE_EVENTS if proto == "responses" else ANTHROPIC_EVENTS
            obj = table[payload["type"]].model_validate(payload)
        assert _extras(obj) == [], _extras(obj)
        out.append(obj)
    return out


def check_responses_order(events: list[Any]) -> None:
    """The rules openai/lib/streaming/responses enforces (provider-fixtures README)."""
    assert events[0].type == "response.created"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    resp_id, added, parts, done = events[0].response.id, set(), set(), set()
    for e in events:
        if hasattr(e, "response"):
            assert e.response.id == resp_id
        if e.type == "response.output_item.added":
            assert e.output_index not in added
            added.add(e.output_index)
        elif e.type == "response.content_part.added":
            parts.add((e.output_index, e.content_index))
        elif e.type.endswith(".delta"):
            assert e.output_index in added
            if e.type in ("response.output_text.delta", "response.refusal.delta"):
                assert (e.output_index, e.content_index) in parts
        elif e.type == "response.output_item.done":
            done.add(e.output_index)
        elif e.type == "response.completed":
            assert added <= done
    assert sum(e.type.startswith("response.") and e.type in TERMINAL for e in events) == 1


TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


# -- streams validate against the SDK types -----------------------------------------------

VALIDATED_STEPS = {
    "text": {"text": "Plain answer with ünïcödé."},
    "calls": {"text": "Checking.", "tool_calls": TWO_CALLS},
    "refusal": {"refusal": "I can't help with that."},
    "truncate": {"tool_calls": TWO_CALLS, "fault": {"type": "truncate"}},
    "content_filter": {
        "text": "Here is a long partial answer",
        "fault": {"type": "content_filter"},
    },
    "interleave": {
        "tool_calls": TWO_CALLS,
        "fault": [{"type": "interleave_arguments"}, {"type": "char_fragments"}],
    },
    "missing_id": {"tool_calls": TWO_CALLS, "fault": {"type": "missing_call_id"}},
    "stream_error": {
        "text": "Partial text then failure",
        "fault": {"type": "stream_error", "after_events": 4},
    },
}


@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_every_stream_validates_against_sdk_types(
    server: ScriptedModelServer, proto: str
) -> None:
    for name, step in VALIDATED_STEPS.items():
        server.add_scenario(f"v-{name}", scenario(step))
        frames = await raw_sse(server, proto, first_request(proto, f"v-{name}"))
        events = validate_stream(proto, frames)
        if proto == "responses" and name != "stream_error":
            check_responses_order(events)
        if proto == "chat" and name != "stream_error":
            assert events[-1] == "[DONE]" and events[-2].choices == [] and events[-2].usage
        if proto == "anthropic" and name != "stream_error":
            assert events[0].type == "message_start" and events[-1].type == "message_stop"


async def test_sdk_stream_helpers_accept_a_normal_scenario(server: ScriptedModelServer) -> None:
    req = first_request("responses", "travel-parallel")
    async with oai(server).responses.stream(**req) as rs:
        final = await rs.get_final_response()
    assert [o.type for o in final.output] == ["message", "function_call", "function_call"]
    req = first_request("chat", "travel-parallel")
    async with oai(server).chat.completions.stream(**req) as cs:
        completion = await cs.get_final_completion()
    calls = completion.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_train_status", "get_weather"]
    req = first_request("anthropic", "travel-parallel")
    async with ant(server).messages.stream(**req) as ms:
        message = await ms.get_final_message()
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]


# -- the conversation decides the step ------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_two_parallel_calls_then_answer_citing_both(
    server: ScriptedModelServer, proto: str, stream: bool
) -> None:
    req = first_request(proto, "travel-parallel", "Train G1234 and weather?")
    first = await ask(server, proto, req, stream)
    assert [c["name"] for c in first.calls.values()] == ["get_train_status", "get_weather"]
    ids = [c["id"] for c in first.calls.values()]
    assert len(set(ids)) == 2 and all(
        i.startswith("toolu_" if proto == "anthropic" else "call_") for i in ids
    )
    results = {"get_train_status": "on time, platform 7", "get_weather": "sunny, 24°C"}
    second = await ask(server, proto, follow_up(proto, req, first, results), stream)
    assert second.calls == {}
    assert second.text == "Train: on time, platform 7. Weather: sunny, 24°C."
    assert [e["step_name"] for e in server.log] == ["ask", "answer"]


# -- strict history rules through the SDK -------------------------------------------------


# Where each OpenAI API carries tool results: (the request's list, a result's call-id field, the
# 400 message when a call's result is missing (with that call's id), and when a result names a
# call nobody issued).
OPENAI_RESULTS = {
    "responses": (
        "input",
        "call_id",
        "No tool output found for function call {}.",
        "No tool call found for function call output with call_id call_NotAnIdWe",
    ),
    "chat": (
        "messages",
        "tool_call_id",
        "The following tool_call_ids did not have response messages: {}",
        "Invalid parameter: 'tool_call_id' of 'call_NotAnIdWeIssued00000000' not found",
    ),
}


def _broken(proto: str, good: dict[str, Any], kind: str) -> tuple[dict[str, Any], str]:
    bad = json.loads(json.dumps(good))
    if proto in OPENAI_RESULTS:
        field, id_field, missing, wrong_id = OPENAI_RESULTS[proto]
        entries = bad[field]
        if kind == "missing":
            return bad, missing.format(entries.pop()[id_field])
        entries[-1][id_field] = "call_NotAnIdWeIssued00000000"
        return bad, wrong_id
    results = bad["messages"][-1]["content"]
    if kind == "missing":
        tid = results.pop()["tool_use_id"]
        return (
            bad,
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            f"after: {tid}.",
        )
    if kind == "wrong_id":
        results.append({"type": "tool_result", "tool_use_id": "toolu_01NotOurs", "content": "x"})
        return (
            bad,
            "messages.2.content.2: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_01NotOurs.",
        )
    results.insert(0, {"type": "text", "text": "Here are the results:"})
    return bad, "messages.2.content.0: `tool_result` blocks must come first"


@pytest.mark.parametrize(
    ("proto", "kind"),
    [(p, k) for p in PROTOCOLS for k in ("missing", "wrong_id")] + [("anthropic", "text_first")],
)
async def test_history_rules_reject_with_the_apis_own_400(
    server: ScriptedModelServer, proto: str, kind: str
) -> None:
    req = first_request(proto, "travel-parallel")
    first = await ask(server, proto, req, stream=True)
    good = follow_up(proto, req, first, {"get_train_status": "late", "get_weather": "sunny"})
    bad, text = _broken(proto, good, kind)
    error_cls = anthropic.BadRequestError if proto == "anthropic" else openai.BadRequestError
    with pytest.raises(error_cls) as info:
        await ask(server, proto, bad, stream=True)
    assert text in info.value.message
    body = info.value.body
    assert isinstance(body, dict)
    if proto == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["request_id"].startswith("req_011C")
        assert info.value.response.headers["x-should-retry"] == "false"
    else:  # the SDK hands over the inner error object
        assert body["type"] == "invalid_request_error" and body["code"] is None
        param = body["param"]
        assert param == "input" or param.startswith("messages.[")
    assert server.log[-1]["status"] == 400
    assert (await ask(server, proto, good, stream=False)).text == "Train: late. Weather: sunny."


# -- faults, read back through the SDKs ---------------------------------------------------

HTTP_FAULTS = {  # fault → (openai class, status, anthropic class, status)
    "http_429": (openai.RateLimitError, 429, anthropic.RateLimitError, 429),
    "http_500": (openai.InternalServerError, 500, anthropic.InternalServerError, 500),
    "overloaded": (openai.InternalServerError, 503, anthropic.OverloadedError, 529),
}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("fault", list(HTTP_FAULTS))
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_http_faults_hit_once_then_the_retry_succeeds(
    server: ScriptedModelServer, proto: str, fault: str, stream: bool
) -> None:
    spec = {"type": fault, "times": 1, "retry_after_s": 2}
    server.add_scenario("f", scenario({"text": "after retry", "fault": spec}))
    o_cls, o_status, a_cls, a_status = HTTP_FAULTS[fault]
    cls, status = (a_cls, a_status) if proto == "anthropic" else (o_cls, o_status)
    with pytest.raises(cls) as info:
        await ask(server, proto, first_request(proto, "f"), stream)
    err = info.value
    assert isinstance(err, openai.APIStatusError | anthropic.APIStatusError)
    assert err.status_code == status
    headers = err.response.headers
    assert headers["x-request-id" if proto != "anthropic" else "request-id"].startswith("req_")
    if fault == "http_429":
        assert headers["retry-after"] == "2"
    if proto == "anthropic":
        assert headers["x-should-retry"] == "true"
        assert isinstance(err.body, dict) and err.body["type"] == "error"
    got = await ask(server, proto, first_request(proto, "f"), stream)
    assert got.text == "after retry"
    assert [(e["faults"], e["status"]) for e in server.log] == [([fault], status), ([], 200)]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_mid_stream_error_event(
    server: ScriptedModelServer, proto: str, stream: bool
) -> None:
    step = {"text": "Some words before it fails", "fault": {"type": "stream_error"}}
    server.add_scenario("f", scenario(step))
    if not stream:  # non-streaming has no mid-stream: the same failure is an HTTP 500
        cls: Any = (
            anthropic.InternalServerError if proto == "anthropic" else openai.InternalServerError
        )
    else:
        cls = anthropic.APIStatusError if proto == "anthropic" else openai.APIError
    with pytest.raises(cls) as info:
        await ask(server, proto, first_request(proto, "f"), stream)
    if stream and proto == "anthropic":
        assert info.value.status_code == 200 and "overloaded_error" in info.value.message
    if stream and proto != "anthropic":
        assert not isinstance(info.value, openai.APIStatusError)
        assert "The server had an error processing your request" in info.value.message


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_dropped_connection(server: ScriptedModelServer, proto: str, stream: bool) -> None:
    server.add_scenario(
        "dropped-stream",
        scenario(
            {
                "tool_calls": [{"name": "get_weather", "arguments": ARGS}],
                "fault": {"type": "drop", "after_events": 4, "times": 1},
            }
        ),
    )
    expected: tuple[type[BaseException], ...] = (openai.APIConnectionError,)
    if proto == "anthropic":  # anthropic 2.16 leaks the transport error from the iterator
        expected = (anthropic.APIConnectionError, httpx2.TransportError)
    with pytest.raises(expected):
        await ask(server, proto, first_request(proto, "dropped-stream"), stream)
    assert server.log[-1]["dropped"] is True
    got = await ask(server, proto, first_request(proto, "dropped-stream"), stream)
    assert [json.loads(a) for a in got.args()] == [ARGS]


TRUNCATED = {"responses": "max_output_tokens", "chat": "length", "anthropic": "max_tokens"}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_truncated_mid_call(server: ScriptedModelServer, proto: str, stream: bool) -> None:
    got = await ask(server, proto, first_request(proto, "truncated-mid-call"), stream)
    assert got.stop == TRUNCATED[proto]
    (args,) = got.args()
    if stream or proto != "anthropic":
        with pytest.raises(json.JSONDecodeError):
            json.loads(args)
        assert args.startswith('{"filename":"taxes.txt"')
    else:  # a Message can only carry an object: the partially parsed one
        assert json.loads(args)["filename"] == "taxes.txt"
    if stream and proto == "responses":
        assert "response.completed" not in got.events and got.events[-1] == "response.incomplete"
        assert "response.function_call_arguments.done" not in got.events
    if stream and proto == "anthropic":  # like stream-max-tokens-mid-tool-use.sse
        assert got.events.count("content_block_start") == 2
        assert got.events.count("content_block_stop") == 1
        assert got.events[-2:] == ["message_delta", "message_stop"]


async def test_truncated_stream_fails_the_responses_stream_helper(
    server: ScriptedModelServer,
) -> None:
    async with oai(server).responses.stream(
        **first_request("responses", "truncated-mid-call")
    ) as s:
        with pytest.raises(RuntimeError, match=r"Didn't receive a `response\.completed` event"):
            await s.get_final_response()


REFUSED = {"responses": "completed", "chat": "stop", "anthropic": "refusal"}
FILTERED = {"responses": "content_filter", "chat": "content_filter", "anthropic": "refusal"}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_refusal_and_content_filter(
    server: ScriptedModelServer, proto: str, stream: bool
) -> None:
    got = await ask(server, proto, first_request(proto, "refusal"), stream)
    assert got.stop == REFUSED[proto] and got.calls == {}
    if proto != "anthropic":  # Anthropic carries no refusal text, only stop_details
        assert got.refusal == "I'm sorry, I can't assist with that request."
    step = {
        "text": "The first half. The second half.",
        "tool_calls": TWO_CALLS,
        "fault": {"type": "content_filter"},
    }
    server.add_scenario("filtered", scenario(step))
    got = await ask(server, proto, first_request(proto, "filtered"), stream)
    assert got.stop == FILTERED[proto] and got.calls == {}
    assert got.text == "The first half. "  # the first half of the text, then the filter


async def test_anthropic_refusal_carries_stop_details(server: ScriptedModelServer) -> None:
    m = await ant(server).messages.create(**first_request("anthropic", "refusal"))
    assert m.stop_reason == "refusal" and m.content == []
    assert m.stop_details is not None and m.stop_details.type == "refusal"


CALL_FAULTS = [
    "invalid_json_arguments",
    "duplicate_call_ids",
    "missing_call_id",
    "interleave_arguments",
    "char_fragments",
]


@pytest.mark.parametrize("fault", CALL_FAULTS)
@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_tool_call_faults_on_the_wire(
    server: ScriptedModelServer, proto: str, fault: str
) -> None:
    calls = [{"name": "get_weather", "arguments": ARGS}, {"name": "get_time", "arguments": ARGS}]
    server.add_scenario("f", scenario({"tool_calls": calls, "fault": {"type": fault}}))
    got = await ask(server, proto, first_request(proto, "f"), stream=True)
    ids = [got.calls[i]["id"] for i in sorted(got.calls)]
    if fault == "invalid_json_arguments":
        for args in got.args():
            with pytest.raises(json.JSONDecodeError):
                json.loads(args)
        return
    assert [json.loads(a) for a in got.args()] == [ARGS, ARGS]
    if fault == "duplicate_call_ids":
        assert ids[0] == ids[1] and ids[0]
    elif fault == "missing_call_id":
        assert not any(ids)
    else:
        assert len(set(ids)) == 2
    frames = await raw_sse(server, proto, first_request(proto, "f"))
    deltas = _arg_deltas(proto, validate_stream(proto, frames))
    if fault == "interleave_arguments":
        owners = [i for i, _ in deltas]
        assert owners[:4] == [owners[0], owners[1], owners[0], owners[1]] and owners[0] != owners[1]
    if fault == "char_fragments":
        pieces = [d for _, d in deltas if d]
        assert all(len(p) == 1 for p in pieces) and "".join(pieces).count("東") == 2


def _arg_deltas(proto: str, events: list[Any]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for e in events:
        if proto == "responses" and e.type == "response.function_call_arguments.delta":
            out.append((e.output_index, e.delta))
        elif proto == "anthropic" and getattr(e, "type", "") == "content_block_delta":
            if e.delta.type == "input_json_delta":
                out.append((e.index, e.delta.partial_json))
        elif proto == "chat" and e != "[DONE]":
            for ch in e.choices:
                for tc in ch.delta.tool_calls or []:
                    if tc.function and tc.function.arguments and not tc.id:
                        out.append((tc.index, tc.function.arguments))
    return out


@pytest.mark.parametrize("proto", PROTOCOLS)
async def test_delay_before_first_byte_and_timeout(server: ScriptedModelServer, proto: str) -> None:
    step = {"text": "slow", "fault": {"type": "delay", "first_byte_s": 0.6, "event_gap_s": 0.01}}
    server.add_scenario("slow", scenario(step))
    t0 = time.monotonic()
    got = await ask(server, proto, first_request(proto, "slow"), stream=True)
    assert got.text == "slow" and time.monotonic() - t0 >= 0.6
    req = first_request(proto, "slow")
    with pytest.raises(
        openai.APITimeoutError if proto != "anthropic" else anthropic.APITimeoutError
    ):
        if proto == "anthropic":
            await ant(server, timeout=0.2).messages.create(**req)
        elif proto == "chat":
            await oai(server, timeout=0.2).chat.completions.create(**req)
        else:
            await oai(server, timeout=0.2).responses.create(**req)


# -- unknown model, the log, the CLI ------------------------------------------------------


async def test_unknown_model_gets_each_apis_not_found(server: ScriptedModelServer) -> None:
    with pytest.raises(openai.BadRequestError) as r:
        await oai(server).responses.create(model="gpt-5.2-proo", input="x")
    assert r.value.code == "model_not_found" and r.value.param == "model"
    assert r.value.message.endswith("The requested model 'gpt-5.2-proo' does not exist.")
    with pytest.raises(openai.NotFoundError) as c:
        await oai(server).chat.completions.create(model="gpt-5.2-proo", messages=[])
    assert "The model `gpt-5.2-proo` does not exist or you do not have access to it." in (
        c.value.message
    )
    with pytest.raises(anthropic.NotFoundError) as a:
        await ant(server).messages.create(model="claude-sonet-4-5", max_tokens=1, messages=[])
    assert isinstance(a.value.body, dict)
    assert a.value.body["error"] == {
        "type": "not_found_error",
        "message": "model: claude-sonet-4-5",
    }


async def test_cli_prints_port_serves_log_and_reset(tmp_path: Path) -> None:
    (tmp_path / "hello.json").write_text(json.dumps(scenario({"text": "hello from the CLI"})))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "callgate.standins.scripted_model",
        "--port",
        "0",
        "--scenarios",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(Path(__file__).resolve().parents[2]),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        base = line.removeprefix("listening on ")
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-SECRET-KEY", max_retries=0)
        async with client:
            r = await client.chat.completions.create(
                model="hello", messages=[{"role": "user", "content": "hi"}]
            )
        assert r.choices[0].message.content == "hello from the CLI"
        async with httpx2.AsyncClient(base_url=base) as http:
            log = (await http.get("/_log")).json()
            assert [(e["path"], e["scenario"], e["step"], e["status"]) for e in log] == [
                ("/v1/chat/completions", "hello", 0, 200)
            ]
            assert "sk-SECRET-KEY" not in json.dumps(log)
            assert (await http.post("/_reset")).json() == {"ok": True}
            assert (await http.get("/_log")).json() == []
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
    stderr = (await proc.stderr.read()).decode()
    assert "step=0" in stderr and "sk-SECRET-KEY" not in stderr


async def test_request_log_keeps_only_the_latest_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running server's log stays bounded; the newest requests are the ones kept."""
    monkeypatch.setattr("callgate.standins.scripted.server.LOG_LIMIT", 3)
    async with ScriptedModelServer(DEFAULT_SCENARIOS) as s:
        client = oai(s)
        try:
            for n in range(5):
                await client.chat.completions.create(
                    model="final-answer", messages=[{"role": "user", "content": f"q{n}"}]
                )
        finally:
            await _OPEN.pop().close()
        asked = [e["body"]["messages"][0]["content"] for e in s.log]
    assert asked == ["q2", "q3", "q4"]


async def test_a_drop_marks_its_own_request_when_another_was_logged_meanwhile(
    server: ScriptedModelServer,
) -> None:
    """The drop is flagged on the dropped request's entry even when a concurrent request
    was logged after it (the last entry is then the other one)."""
    slow_drop = [
        {"type": "drop", "after_events": 4, "times": 1},
        {"type": "delay", "event_gap_s": 0.1},
    ]
    server.add_scenario(
        "slow-drop",
        scenario({"tool_calls": [{"name": "get_weather", "arguments": ARGS}], "fault": slow_drop}),
    )
    dropped = asyncio.create_task(ask(server, "chat", first_request("chat", "slow-drop"), True))
    while not server.log:
        await asyncio.sleep(0.01)
    await ask(server, "chat", first_request("chat", "final-answer"), True)
    with pytest.raises(openai.APIConnectionError):
        await dropped
    assert [(e["scenario"], e.get("dropped")) for e in server.log] == [
        ("slow-drop", True),
        ("final-answer", None),
    ]
