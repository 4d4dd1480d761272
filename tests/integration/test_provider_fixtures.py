"""Every recorded provider fixture, replayed over loopback HTTP through the official SDK
into its adapter, yields the internal event the table says; plus broken connections.

One row per file in ../shared/provider-fixtures/*/ (request-*.json excepted: those are
request bodies, checked in tests/unit/test_provider_mapping.py).  A new fixture file
without a row fails `test_every_fixture_has_a_row`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from callgate.providers import get_adapter
from callgate.providers.base import (
    FinalAnswer,
    Incomplete,
    ProviderAdapter,
    Refused,
    RequestFailed,
    ToolRequests,
    TurnInput,
    TurnOutcome,
)
from callgate.tools.contract import ToolSpec
from tests.integration.fixture_server import FixtureServer, Reply
from tests.provider_fixtures import FIXTURES, HANDBOOK_COPY

pytestmark = pytest.mark.timeout(30)

RESP, CHAT, ANTH = "openai-responses", "openai-chat", "anthropic-messages"
TOOLS = [ToolSpec("get_weather", "Weather for a city.", {"type": "object", "properties": {}})]


@dataclass(frozen=True)
class Expect:
    event: type
    tag: str | None = None
    """Incomplete.reason or RequestFailed.kind."""
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    text: str | None = None
    """A substring of the event's text, message or detail."""
    status: int | None = None
    retryable: bool | None = None
    retry_after_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers the fixture server adds (recorded ones, or to test retry-after)."""


def _failed(kind: str, status: int, text: str, **kw: Any) -> Expect:
    return Expect(RequestFailed, kind, status=status, text=text, **kw)


def _calls(*calls: tuple[str, str, dict[str, Any]], text: str | None = None) -> Expect:
    return Expect(ToolRequests, calls=calls, text=text)


TABLE: dict[str, dict[str, Expect]] = {
    RESP: {
        "error-400-invalid-request.json": _failed("bad_request", 400, "Invalid 'temperature'"),
        "error-400-model-not-found.json": _failed("bad_request", 400, "does not exist"),
        "error-400-no-tool-call-found-for-output.json": _failed(
            "bad_request", 400, "No tool call found"
        ),
        "error-400-no-tool-output-found.json": _failed("bad_request", 400, "No tool output found"),
        "error-400-reasoning-item-without-following-item.json": _failed(
            "bad_request", 400, "without its required following item"
        ),
        # insufficient_quota comes as a 429, but waiting does not help.
        "error-429-insufficient-quota.json": _failed(
            "rate_limited",
            429,
            "exceeded your current quota",
            retryable=False,
            retry_after_s=7.0,
            headers={"retry-after": "7"},
        ),
        "error-500-server-error.json": _failed(
            "server_error", 500, "The server had an error", retryable=True
        ),
        "nonstream-function-call.json": _calls(
            ("call_4xx2dWcsD4MBA3MnmqGIifGE", "lookup_refund_policy", {"order_id": "order-123"})
        ),
        "nonstream-incomplete-max-output-tokens.json": Expect(Incomplete, "max_tokens"),
        "nonstream-parallel-function-calls.json": _calls(
            ("call_LWVp74L5HaH2KNvgVz9PJsrj", "get_location", {"loc_name": "Londos"}),
            ("call_YnRAWeTyxI91m5uNa5bxXwVO", "get_location", {"loc_name": "London"}),
        ),
        "nonstream-refusal.json": Expect(Refused, text="can't assist"),
        "nonstream-text.json": Expect(FinalAnswer, text="San Francisco"),
        "stream-error-event-openapi-flat-shape.sse": _failed(
            "server_error", 200, "Something went wrong", retryable=True
        ),
        "stream-error-event.sse": _failed(
            "rate_limited", 200, "exceeded your current quota", retryable=False
        ),
        "stream-function-call.sse": _calls(
            ("call_Q6pW65MUgW9vF59BmItYGos3", "calculator", {"a": 19, "b": 3, "op": "multiply"})
        ),
        "stream-incomplete-max-output-tokens.sse": Expect(Incomplete, "max_tokens"),
        "stream-parallel-function-calls.sse": _calls(
            (
                "call_SJiaC1TXbxeEz3E9NqIitlNw",
                "search",
                {"query": "Detroit Tigers game schedule October 10 2023"},
            ),
            ("call_m6EXLHUhaq7ofMlz1ktzS8R8", "weather", {"city": "Detroit"}),
        ),
        "stream-reasoning-commentary-function-call.sse": _calls(
            ("call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", {"country": "PotatoLand"}),
            text="capital lookup tool",
        ),
        "stream-refusal.sse": Expect(Refused, text="can't assist"),
        "stream-text.sse": Expect(FinalAnswer, text="Potato City"),
    },
    CHAT: {
        "error-400-tool-calls-without-tool-messages.json": _failed(
            "bad_request", 400, "must be followed by tool messages"
        ),
        "error-400-tool-message-without-tool-calls.json": _failed(
            "bad_request", 400, "must be a response to a preceeding message"
        ),
        "error-400-unsupported-value.json": _failed("bad_request", 400, "Unsupported value"),
        "error-404-model-not-found.json": _failed("bad_request", 404, "does not exist"),
        "error-429-rate-limit-tokens.json": _failed(
            "rate_limited",
            429,
            "Request too large",
            retryable=True,
            retry_after_s=0.174,
            headers={"retry-after-ms": "174", "retry-after": "1"},
        ),
        "nonstream-content-filter.json": Expect(Incomplete, "content_filter"),
        "nonstream-length.json": Expect(Incomplete, "max_tokens"),
        "nonstream-parallel-tool-calls-gpt-4o.json": _calls(
            ("call_jYdIdRZHxZTn5bWCq5jlMrJi", "delete_file", {"path": ".env"}),
            ("call_TmlTVWQbzrXCZ4jNsCVNbNqu", "create_file", {"path": "test.txt"}),
        ),
        "nonstream-parallel-tool-calls.json": _calls(
            (
                "call_fdNz3vOBKYgOIpMdWotB9MjY",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "GB", "units": "c"},
            ),
            (
                "call_h1DWI1POMJLb0KwIyQHWXD4p",
                "get_stock_price",
                {"ticker": "AAPL", "exchange": "NASDAQ"},
            ),
        ),
        "nonstream-refusal.json": Expect(Refused, text="can't assist"),
        "nonstream-text.json": Expect(FinalAnswer, text="real-time weather"),
        "nonstream-tool-call.json": _calls(
            (
                "call_Y6qJ7ofLgOrBnMD5WbVAeiRV",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "UK", "units": "c"},
            )
        ),
        "stream-content-filter.sse": Expect(Incomplete, "content_filter"),
        "stream-length.sse": Expect(Incomplete, "max_tokens"),
        "stream-parallel-tool-calls.sse": _calls(
            (
                "call_JMW1whyEaYG438VE1OIflxA2",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "GB", "units": "c"},
            ),
            (
                "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                "get_stock_price",
                {"ticker": "AAPL", "exchange": "NASDAQ"},
            ),
        ),
        "stream-refusal.sse": Expect(Refused, text="can't assist"),
        "stream-text.sse": Expect(FinalAnswer, text="real-time weather"),
        "stream-tool-call.sse": _calls(
            (
                "call_c91SqDXlYFuETYv8mUHzz6pp",
                "GetWeatherArgs",
                {"city": "Edinburgh", "country": "UK", "units": "c"},
            )
        ),
    },
    ANTH: {
        "error-400-invalid-request.json": _failed(
            "bad_request",
            400,
            "does not support effort level",
            retryable=False,
            headers={"x-should-retry": "false"},
        ),
        "error-400-unexpected-tool-use-id.json": _failed(
            "bad_request",
            400,
            "unexpected `tool_use_id`",
            retryable=False,
            headers={"x-should-retry": "false"},
        ),
        "error-404-not-found.json": _failed("bad_request", 404, "claude-sonet-4-5"),
        "error-429-rate-limit.json": _failed(
            "rate_limited",
            429,
            "exceed your organization's rate limit",
            retryable=True,
            retry_after_s=12.0,
            headers={"x-should-retry": "true", "retry-after": "12"},
        ),
        "error-529-overloaded.json": _failed("overloaded", 529, "Overloaded", retryable=True),
        "nonstream-end-turn-after-tool-error.json": Expect(FinalAnswer, text="error"),
        "nonstream-end-turn.json": Expect(FinalAnswer, text="68°F and Sunny"),
        "nonstream-max-tokens.json": Expect(Incomplete, "max_tokens"),
        "nonstream-parallel-tool-use-4-calls.json": _calls(
            ("toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", {"name": "Alice"}),
            ("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", {"name": "Bob"}),
            ("toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", {"name": "Charlie"}),
            ("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", {"name": "Daisy"}),
            text="youngest",
        ),
        "nonstream-parallel-tool-use.json": _calls(
            ("toolu_01BBTvQnxdxk7vPHD1ytXyGs", "get_weather", {"city": "Denver"}),
            ("toolu_017Q9pGQ9Hx126pyyLLnVqJV", "get_elevation", {"city": "Denver"}),
            text="weather and elevation",
        ),
        "nonstream-pause-turn.json": Expect(Incomplete, "other", text="pause_turn"),
        "nonstream-refusal.json": Expect(Refused, text="Usage Policy"),
        "nonstream-stop-sequence.json": Expect(FinalAnswer, text="The beautiful city of "),
        "nonstream-tool-use.json": _calls(
            (
                "toolu_016xm9m1i3NcGW5xFMMZJTqY",
                "get_weather",
                {"location": "San Francisco, CA", "units": "f"},
            )
        ),
        "stream-error-overloaded.sse": _failed("overloaded", 200, "Overloaded", retryable=True),
        # Cut by max_tokens inside the tool_use block: the SDK would hand back partial input.
        "stream-max-tokens-mid-tool-use.sse": Expect(Incomplete, "max_tokens"),
        "stream-parallel-tool-use.sse": _calls(
            ("toolu_01BBTvQnxdxk7vPHD1ytXyGs", "get_weather", {"city": "Denver"}),
            ("toolu_017Q9pGQ9Hx126pyyLLnVqJV", "get_elevation", {"city": "Denver"}),
            text="weather and elevation",
        ),
        "stream-refusal.sse": Expect(Refused, text="Usage Policy"),
        # The file ends without the blank line that terminates an SSE event, so the SDK never
        # dispatches its `message_stop`: without the completion event it is not a tool request.
        # (`test_text_then_tool_use_with_terminated_sse` serves it with the terminator.)
        "stream-text-then-tool-use.sse": Expect(Incomplete, "stream_ended"),
        "stream-text.sse": Expect(FinalAnswer, text="68°F"),
        "stream-tool-use.sse": _calls(
            (
                "toolu_018acGYLtfR52q9yDbWaEdQZ",
                "get_weather",
                {"location": "San Francisco, CA", "units": "f"},
            )
        ),
    },
}


def _rows() -> list[Any]:
    rows = []
    for api, files in TABLE.items():
        for name, expect in files.items():
            modes = [True, False] if name.startswith("error-") else [name.endswith(".sse")]
            for stream in modes:
                label = f"{api}/{name}" + ("" if len(modes) == 1 else f"[stream={stream}]")
                rows.append(pytest.param(api, name, stream, expect, id=label))
    return rows


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FixtureServer]:
    """A fixture server both SDKs point at through their own environment variables."""
    srv = await FixtureServer().start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    try:
        yield srv
    finally:
        await srv.close()


async def _run(
    api: str, *, stream: bool = True, timeout_s: float = 5.0
) -> tuple[ProviderAdapter, TurnOutcome]:
    adapter = get_adapter(api, stream=stream)
    turn = TurnInput(
        model="test-model",
        history=adapter.initial_history("What is the weather?"),
        tools=TOOLS,
        instructions="Be brief.",
        timeout_s=timeout_s,
    )
    return adapter, await adapter.complete(turn)


def _check_event(outcome: TurnOutcome, expect: Expect) -> None:
    event = outcome.event
    assert type(event) is expect.event, event
    match event:
        case ToolRequests(calls=calls, text=text):
            got = [(c.provider_call_id, c.name, c.arguments) for c in calls]
            assert got == list(expect.calls)
            for c in calls:
                assert json.loads(c.raw_arguments) == c.arguments
            assert (text is None) == (expect.text is None)
            assert expect.text is None or expect.text in str(text)
        case FinalAnswer(text=text) | Refused(message=text):
            assert expect.text is not None and expect.text in text
        case Incomplete(reason=reason, detail=detail):
            assert reason == expect.tag
            assert expect.text is None or expect.text in detail
        case RequestFailed():
            assert (event.kind, event.status) == (expect.tag, expect.status)
            assert expect.text is not None and expect.text in event.message
            assert event.retry_after_s == pytest.approx(expect.retry_after_s)
            assert expect.retryable is None or event.retryable is expect.retryable


def _check_record(api: str, outcome: TurnOutcome) -> None:
    record = outcome.record
    provider = "anthropic" if api == ANTH else "openai"
    assert (record.provider, record.api) == (provider, api)
    if api == ANTH:
        assert record.sdk_version == anthropic.__version__
        assert record.api_version and record.api_version[:2] == "20"  # anthropic-version date
    else:
        assert record.sdk_version == openai.__version__
        assert record.api_version is None  # openai sends no API version header
    json.dumps(record.raw_output)  # JSON-able
    usable = isinstance(outcome.event, FinalAnswer | ToolRequests | Refused)
    assert bool(record.assistant_items) == (usable and record.raw_output.get("content") != [])
    if not isinstance(outcome.event, RequestFailed):
        assert record.response_id and record.response_id == record.raw_output.get("id")


@pytest.mark.parametrize(("api", "name", "stream", "expect"), _rows())
async def test_fixture_replay(
    server: FixtureServer, api: str, name: str, stream: bool, expect: Expect
) -> None:
    status = int(name.split("-")[1]) if name.startswith("error-") else 200
    server.reply = Reply.from_file(FIXTURES / api / name, status, headers=expect.headers)
    _, outcome = await _run(api, stream=stream)
    _check_event(outcome, expect)
    _check_record(api, outcome)
    assert len(server.requests) == 1, "the SDK must not retry (max_retries=0)"
    assert server.requests[0].body["stream"] is stream


def test_every_fixture_has_a_row() -> None:
    for api, files in TABLE.items():
        on_disk = {p.name for p in (FIXTURES / api).iterdir() if not p.name.startswith("request-")}
        assert on_disk == set(files), api


async def test_text_then_tool_use_with_terminated_sse(server: FixtureServer) -> None:
    body = (FIXTURES / ANTH / "stream-text-then-tool-use.sse").read_bytes() + b"\n\n"
    server.reply = Reply(body=body, content_type="text/event-stream")
    _, outcome = await _run(ANTH)
    expect = _calls(
        ("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", {"location": "Paris"}),
        text="check the current weather in Paris",
    )
    _check_event(outcome, expect)
    assert outcome.record.input_tokens == 377 and outcome.record.output_tokens == 65


# A tool-call stream per protocol, and the bytes that start its completion event.
TOOL_STREAMS = {
    RESP: ("stream-function-call.sse", b"event: response.completed"),
    CHAT: ("stream-tool-call.sse", b'"finish_reason":"tool_calls"'),
    ANTH: ("stream-tool-use.sse", b"event: message_delta"),
}


@pytest.mark.parametrize("api", [RESP, CHAT, ANTH])
async def test_dropped_connection_mid_stream(server: FixtureServer, api: str) -> None:
    """The socket closes inside the chunked body: a transport error, never a tool call."""
    name, marker = TOOL_STREAMS[api]
    body = (FIXTURES / api / name).read_bytes()
    server.reply = Reply(
        body=body, content_type="text/event-stream", drop_after=body.index(marker) - 40
    )
    _, outcome = await _run(api)
    assert isinstance(outcome.event, RequestFailed), outcome.event
    assert outcome.event.kind == "transport_error" and outcome.event.retryable
    assert outcome.record.assistant_items == []


@pytest.mark.parametrize("api", [RESP, CHAT, ANTH])
async def test_stream_ending_before_completion_event(server: FixtureServer, api: str) -> None:
    """A cleanly ended body without the completion event: Incomplete, never a tool call."""
    name, marker = TOOL_STREAMS[api]
    body = (FIXTURES / api / name).read_bytes()
    cut = body.rindex(b"\n\n", 0, body.index(marker)) + 2
    server.reply = Reply(body=body[:cut], content_type="text/event-stream")
    _, outcome = await _run(api)
    assert isinstance(outcome.event, Incomplete), outcome.event
    assert outcome.event.reason == "stream_ended"
    assert outcome.record.assistant_items == []


# Argument fragments made non-ASCII: raw multi-byte UTF-8 in one fragment, and a JSON-escaped
# surrogate pair split across two fragments (the SDK decodes each half on its own).
UTF8_EDITS = {
    RESP: (
        [(b'"delta":"multiply"', '"delta":"multïply ☃\\ud83d"'.encode()),
         (b'"delta":"\\"}"', b'"delta":"\\ude00\\"}"'),
         (b'\\"op\\":\\"multiply\\"}"', '\\"op\\":\\"multïply ☃\\ud83d\\ude00\\"}"'.encode())],
        {"a": 19, "b": 3, "op": "multïply ☃😀"},
    ),
    CHAT: (
        [(b'"arguments":"Ed"', b'"arguments":"\\u00c9d\\ud83d"'),
         (b'"arguments":"inburgh"', '"arguments":"\\ude00inbürgh 雪"'.encode())],
        {"city": "Éd😀inbürgh 雪", "country": "UK", "units": "c"},
    ),
    ANTH: (
        [(b'"partial_json":"anci"', '"partial_json":"ançi\\ud83d"'.encode()),
         (b'"partial_json":"sco, CA\\""', b'"partial_json":"\\ude00sco, CA\\""')],
        {"location": "San Françi😀sco, CA", "units": "f"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("api", [RESP, CHAT, ANTH])
async def test_one_byte_chunks_with_split_multibyte_arguments(
    server: FixtureServer, api: str
) -> None:
    """Served one byte per HTTP chunk, so every multi-byte character is split on the wire."""
    edits, arguments = UTF8_EDITS[api]
    body = (FIXTURES / api / TOOL_STREAMS[api][0]).read_bytes()
    for old, new in edits:
        assert old in body, old
        body = body.replace(old, new)
    server.reply = Reply(body=body, content_type="text/event-stream", chunk_size=1)
    _, outcome = await _run(api)
    assert isinstance(outcome.event, ToolRequests), outcome.event
    (call,) = outcome.event.calls
    assert call.arguments == arguments
    assert json.loads(call.raw_arguments) == arguments
    call.raw_arguments.encode("utf-8")  # no lone surrogates left


@pytest.mark.parametrize("api", [RESP, CHAT, ANTH])
async def test_stalled_server_times_out(server: FixtureServer, api: str) -> None:
    name = TOOL_STREAMS[api][0]
    server.reply = Reply.from_file(FIXTURES / api / name, stall_s=3.0)
    _, outcome = await _run(api, timeout_s=0.3)
    assert isinstance(outcome.event, RequestFailed), outcome.event
    assert outcome.event.kind == "timeout" and outcome.event.retryable


@pytest.mark.parametrize("api", [RESP, CHAT, ANTH])
async def test_connection_refused_is_a_transport_error(
    server: FixtureServer, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    await server.close()  # nothing listens on the port any more
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    _, outcome = await _run(api)
    assert isinstance(outcome.event, RequestFailed), outcome.event
    assert outcome.event.kind == "transport_error" and outcome.event.retryable


async def test_requests_carry_what_each_api_needs(server: FixtureServer) -> None:
    """Usage on Chat streams needs include_usage; Anthropic needs max_tokens; tools per API."""
    for api, name in [
        (RESP, "stream-text.sse"),
        (CHAT, "stream-text.sse"),
        (ANTH, "stream-text.sse"),
    ]:
        server.reply = Reply.from_file(FIXTURES / api / name)
        await _run(api)
    responses, chat, messages = (r.body for r in server.requests)
    assert responses["instructions"] == "Be brief."
    assert responses["tools"][0] == {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat["tools"][0]["function"]["name"] == "get_weather"
    assert messages["max_tokens"] == 1024 and messages["system"] == "Be brief."
    assert messages["tools"][0]["input_schema"] == {"type": "object", "properties": {}}
    assert [r.path for r in server.requests] == [
        "/v1/responses",
        "/v1/chat/completions",
        "/v1/messages",
    ]


@pytest.mark.skipif(not HANDBOOK_COPY.is_dir(), reason="no handbook beside the repository")
def test_the_copy_is_the_handbook_s_recording() -> None:
    """The project's copy must not drift from the handbook's, where both are at hand."""
    assert _files(FIXTURES) == _files(HANDBOOK_COPY)


def _files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
