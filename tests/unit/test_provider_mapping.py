"""Pure mapping of the three provider adapters: history shapes against the recorded request
bodies, call-id checks, fragment assembly and the classification rules. No I/O but
reading the fixture files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from callgate.providers import anthropic_messages as anth
from callgate.providers import get_adapter
from callgate.providers import openai_chat as chat
from callgate.providers import openai_responses as resp
from callgate.providers.base import (
    TURN_EVENT,
    FinalAnswer,
    Incomplete,
    JsonDict,
    RequestFailed,
    ToolRequests,
    ToolResultInput,
    TurnEvent,
    TurnInput,
    event_to_json,
)
from callgate.providers.common import join_fragments, retry_after_s, settle
from callgate.tools.contract import ToolSpec
from tests.provider_fixtures import FIXTURES


def _load(api: str, name: str) -> Any:
    return json.loads((FIXTURES / api / name).read_text())


def _calls(event: object) -> list[tuple[str, str, dict[str, Any]]]:
    assert isinstance(event, ToolRequests), event
    return [(c.provider_call_id, c.name, c.arguments) for c in event.calls]


# --- history shapes against accepted (HTTP 200) request bodies ---------------------------


def test_responses_history_matches_recorded_parallel_outputs() -> None:
    recorded = _load("openai-responses", "request-parallel-function-call-outputs.json")["input"]
    calls, outputs = recorded[2:4], recorded[4:6]
    response = _load("openai-responses", "nonstream-parallel-function-calls.json")
    event, items = resp.from_provider(response)
    assert items == calls  # re-sent without id/status, exactly as the accepted request
    adapter = get_adapter("openai-responses")
    results = [ToolResultInput(o["call_id"], o["output"]) for o in outputs]
    assert adapter.result_items(results) == outputs
    assert [c.provider_call_id for c in _as_requests(event).calls] == [
        o["call_id"] for o in outputs
    ]


def test_responses_history_keeps_reasoning_and_commentary_before_the_call() -> None:
    recorded = _load("openai-responses", "request-reasoning-function-call-output.json")["input"]
    reasoning, message, call, output = recorded[1:5]
    response = {"id": "resp_1", "status": "completed", "output": [
        {**reasoning, "status": None}, message, {**call, "status": "completed"},
    ]}  # fmt: skip
    _, items = resp.from_provider(response)
    # Same items in the same order (R3); the call without its fc_ id (R5 allows that).
    assert items == [reasoning, message, {k: v for k, v in call.items() if k != "id"}]
    adapter = get_adapter("openai-responses")
    assert adapter.result_items([ToolResultInput(call["call_id"], "Potato City")]) == [output]


def test_chat_history_matches_recorded_tool_messages() -> None:
    recorded = _load("openai-chat", "request-tool-messages.json")["messages"]
    event, items = chat.from_provider(
        _load("openai-chat", "nonstream-parallel-tool-calls-gpt-4o.json")
    )
    assert items == [recorded[2]]
    results = [ToolResultInput(m["tool_call_id"], m["content"]) for m in recorded[3:5]]
    assert get_adapter("openai-chat").result_items(results) == recorded[3:5]
    assert [c.provider_call_id for c in _as_requests(event).calls] == [
        m["tool_call_id"] for m in recorded[3:5]
    ]


def test_anthropic_history_matches_recorded_tool_results() -> None:
    recorded = _load("anthropic-messages", "request-tool-results.json")["messages"]
    message = _load("anthropic-messages", "nonstream-parallel-tool-use-4-calls.json")
    event, items = anth.from_provider(message)
    assert items == [recorded[1]]
    blocks = recorded[2]["content"]
    results = [ToolResultInput(b["tool_use_id"], b["content"], b["is_error"]) for b in blocks]
    # One user message, only tool_result blocks, in call order (A1, A4).
    assert get_adapter("anthropic-messages").result_items(results) == [recorded[2]]
    assert [c.provider_call_id for c in _as_requests(event).calls] == [
        b["tool_use_id"] for b in blocks
    ]


def test_anthropic_error_result_matches_recorded_is_error() -> None:
    recorded = _load("anthropic-messages", "request-tool-result-is-error.json")["messages"]
    block = recorded[2]["content"][0]
    items = get_adapter("anthropic-messages").result_items(
        [ToolResultInput(block["tool_use_id"], block["content"], is_error=True)]
    )
    assert items == [recorded[2]]
    # The assistant turn it answers, re-sent with its tool_use block (caller kept).
    _, assistant = anth.from_provider(_load("anthropic-messages", "nonstream-tool-use.json"))
    single = _load("anthropic-messages", "request-tool-result.json")["messages"]
    assert assistant == [single[1]]


def _as_requests(event: object) -> ToolRequests:
    assert isinstance(event, ToolRequests), event
    return event


# --- call ids ----------------------------------------------------------------------------


def _chat_response(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": list(tool_calls)}
    return {
        "id": "c1",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


def _tc(call_id: str | None, args: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": args}}


def _fc(call_id: str | None, args: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": args}


def _tu(call_id: str | None, arguments: object = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "f", "input": arguments or {}}


def _anth_message(*blocks: dict[str, Any], stop: str = "tool_use") -> dict[str, Any]:
    return {"id": "m1", "content": list(blocks), "stop_reason": stop}


@pytest.mark.parametrize(
    ("classify", "ok", "duplicate", "missing"),
    [
        (
            chat.from_provider,
            _chat_response(_tc("a"), _tc("b")),
            _chat_response(_tc("a"), _tc("a")),
            _chat_response(_tc("a"), _tc(None)),
        ),
        (
            resp.from_provider,
            {"status": "completed", "output": [_fc("a"), _fc("b")]},
            {"status": "completed", "output": [_fc("a"), _fc("a")]},
            {"status": "completed", "output": [_fc(None), _fc("b")]},
        ),
        (
            anth.from_provider,
            _anth_message(_tu("a"), _tu("b")),
            _anth_message(_tu("a"), _tu("a")),
            _anth_message(_tu("a"), _tu("")),
        ),
    ],
    ids=["chat", "responses", "anthropic"],
)
def test_duplicate_and_missing_call_ids(
    classify: Any, ok: dict[str, Any], duplicate: dict[str, Any], missing: dict[str, Any]
) -> None:
    assert [c[0] for c in _calls(classify(ok)[0])] == ["a", "b"]
    event, items = classify(duplicate)
    assert event == Incomplete(reason="duplicate_call_id", detail="a") and items == []
    event, items = classify(missing)
    assert isinstance(event, Incomplete) and event.reason == "missing_call_id" and items == []


@pytest.mark.parametrize("raw", ['{"a": 1', "[1, 2]", '"text"', "", "null", '{"a":1}{"b":2}'])
def test_arguments_that_are_not_one_json_object(raw: str) -> None:
    event, items = chat.from_provider(_chat_response(_tc("a", raw)))
    assert isinstance(event, Incomplete) and event.reason == "invalid_arguments" and items == []
    event, _ = resp.from_provider({"status": "completed", "output": [_fc("a", raw)]})
    assert isinstance(event, Incomplete) and event.reason == "invalid_arguments"


# --- fragment assembly -------------------------------------------------------------------

ARGS = {"city": "Zürich ☃ 😀", "n": [1, 2.5, None], "nested": {"ok": True}}
ARGS_TEXT = json.dumps(ARGS, ensure_ascii=False)


def _one_char_fragments(text: str) -> list[str]:
    """One code point per fragment, the emoji sent as two surrogate halves (as a JSON
    escape split across two deltas decodes)."""
    fragments: list[str] = []
    for ch in text:
        if ord(ch) > 0xFFFF:
            units = ch.encode("utf-16-le")
            fragments += [units[:2].decode("utf-16-le", "surrogatepass"),
                          units[2:].decode("utf-16-le", "surrogatepass")]  # fmt: skip
        else:
            fragments.append(ch)
    return fragments


def test_join_fragments_repairs_split_surrogates() -> None:
    fragments = _one_char_fragments(ARGS_TEXT)
    assert any(0xD800 <= ord(f) <= 0xDFFF for f in fragments)
    joined = join_fragments(fragments)
    assert joined == ARGS_TEXT and json.loads(joined) == ARGS
    joined.encode("utf-8")


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _chat_frag(index: int, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        fragment |= {
            "id": call_id,
            "type": "function",
            "function": {"name": f"f{index}", "arguments": arguments},
        }
    return _chat_chunk({"tool_calls": [fragment]})


def test_chat_interleaved_one_char_fragments() -> None:
    other = {"q": "é"}
    stream = chat.ChatStream()
    stream.feed(_chat_frag(0, "", "call_a"))
    stream.feed(_chat_frag(1, "", "call_b"))
    a, b = _one_char_fragments(ARGS_TEXT), list(json.dumps(other, ensure_ascii=False))
    for i in range(max(len(a), len(b))):  # alternate between the two calls
        if i < len(a):
            stream.feed(_chat_frag(0, a[i]))
        if i < len(b):
            stream.feed(_chat_frag(1, b[i]))
    stream.feed(_chat_chunk({}, "tool_calls"))
    stream.feed({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    response, problem = stream.finish()
    assert problem is None
    event, items = chat.from_provider(response)
    assert _calls(event) == [("call_a", "f0", ARGS), ("call_b", "f1", other)]
    assert items[0]["tool_calls"][0]["function"]["arguments"] == ARGS_TEXT
    assert response["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}


def test_chat_stream_without_finish_reason_is_never_a_tool_call() -> None:
    stream = chat.ChatStream()
    stream.feed(_chat_frag(0, '{"a": 1}', "call_a"))
    response, problem = stream.finish()
    assert settle(chat.from_provider(response)[0], problem) == Incomplete(
        reason="stream_ended", detail="no finish_reason"
    )


def test_chat_changed_call_id_for_one_index_is_incomplete() -> None:
    stream = chat.ChatStream()
    stream.feed(_chat_frag(0, "{}", "call_a"))
    stream.feed(_chat_frag(0, "", "call_z"))
    stream.feed(_chat_chunk({}, "tool_calls"))
    response, problem = stream.finish()
    event = settle(chat.from_provider(response)[0], problem)
    assert isinstance(event, Incomplete) and event.reason == "other"


def _resp_delta(index: int, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": index, "delta": delta}


def test_responses_interleaved_fragments_assembled_when_final_output_is_empty() -> None:
    stream = resp.ResponsesStream()
    stream.feed({"type": "response.created", "response": {"id": "r1", "status": "in_progress"}})
    for index, call_id in [(0, "call_a"), (1, "call_b")]:
        item = {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": call_id,
            "name": "f",
            "arguments": "",
        }
        stream.feed({"type": "response.output_item.added", "output_index": index, "item": item})
    for ch in _one_char_fragments(ARGS_TEXT):
        stream.feed(_resp_delta(0, ch))
        stream.feed(_resp_delta(1, ch))
    completed = {"id": "r1", "status": "completed", "output": [], "usage": {"input_tokens": 1}}
    stream.feed({"type": "response.completed", "response": completed})
    response, problem = stream.finish()
    # Items added but never `done` and absent from the final output: not complete.
    assert problem is not None and problem.kind == "incomplete"
    for index in (0, 1):
        item = {**stream.items[index], "status": "completed"}
        stream.feed({"type": "response.output_item.done", "output_index": index, "item": item})
    response, problem = stream.finish()
    assert problem is None
    event, items = resp.from_provider(response)
    assert _calls(event) == [("call_a", "f", ARGS), ("call_b", "f", ARGS)]
    assert items[0] == {
        "type": "function_call",
        "call_id": "call_a",
        "name": "f",
        "arguments": ARGS_TEXT,
    }


def test_responses_stream_without_terminal_event() -> None:
    stream = resp.ResponsesStream()
    stream.feed({"type": "response.created", "response": {"id": "r1", "status": "in_progress"}})
    item = _fc("call_a", '{"a": 1}') | {"status": "completed"}
    stream.feed({"type": "response.output_item.done", "output_index": 0, "item": item})
    response, problem = stream.finish()
    assert settle(resp.from_provider(response)[0], problem) == Incomplete(
        reason="stream_ended", detail="no terminal event"
    )


def test_responses_flat_error_event_fails_the_request() -> None:
    stream = resp.ResponsesStream()
    stream.feed(
        {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None}
    )
    _, problem = stream.finish()
    assert isinstance(problem, RequestFailed)
    assert (problem.kind, problem.message, problem.status) == ("rate_limited", "slow down", 200)


def _anth_finish(*events: dict[str, Any]) -> tuple[JsonDict, Mapping[int, str], Any]:
    """The assembled message, the raw tool inputs it kept, and the stream's problem."""
    stream = _anth_events(*events)
    message, problem = stream.finish()
    return message, stream.raw_inputs, problem


def _anth_events(*events: dict[str, Any]) -> anth.MessagesStream:
    stream = anth.MessagesStream()
    stream.feed(
        {
            "type": "message_start",
            "message": {"id": "m1", "content": [], "usage": {"input_tokens": 9}},
        }
    )
    for event in events:
        stream.feed(event)
    return stream


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _json_delta(index: int, partial: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial},
    }


def _stop(stop_reason: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]


def test_anthropic_interleaved_one_char_blocks() -> None:
    events: list[dict[str, Any]] = [
        _block_start(0, {"type": "text", "text": ""}),
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Two calls."},
        },
        {"type": "content_block_stop", "index": 0},
        _block_start(1, _tu("toolu_a")),
        _block_start(2, _tu("toolu_b")),
        _json_delta(1, ""),
    ]
    for ch in _one_char_fragments(ARGS_TEXT):
        events += [_json_delta(2, ch), _json_delta(1, ch)]
    events += [
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_stop", "index": 2},
    ]
    message, raw_inputs, problem = _anth_finish(*events, *_stop("tool_use"))
    assert problem is None and raw_inputs[1] == ARGS_TEXT
    event, items = anth.from_provider(message, raw_inputs)
    assert _calls(event) == [("toolu_a", "f", ARGS), ("toolu_b", "f", ARGS)]
    assert isinstance(event, ToolRequests) and event.text == "Two calls."
    assert items[0]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "f",
        "input": ARGS,
    }
    assert message["usage"] == {"input_tokens": 9, "output_tokens": 7}


def test_anthropic_tool_block_without_stop_event_is_never_a_tool_call() -> None:
    events = [_block_start(0, _tu("toolu_a")), _json_delta(0, '{"a": 1}')]
    message, raw_inputs, problem = _anth_finish(*events, *_stop("tool_use"))
    event = settle(anth.from_provider(message, raw_inputs)[0], problem)
    assert event == Incomplete(reason="stream_ended", detail="block 0 has no content_block_stop")


def test_anthropic_max_tokens_mid_tool_use_wins_over_stream_problem() -> None:
    events = [_block_start(0, _tu("toolu_a")), _json_delta(0, '{"a": "trunc')]
    message, raw_inputs, problem = _anth_finish(*events, *_stop("max_tokens"))
    assert message["content"][0]["input"] is None  # the partial JSON is not shown as valid
    event = settle(anth.from_provider(message, raw_inputs)[0], problem)
    assert isinstance(event, Incomplete) and event.reason == "max_tokens"


def test_anthropic_tool_without_arguments_streams_empty_fragment() -> None:
    events = [
        _block_start(0, _tu("toolu_a")),
        _json_delta(0, ""),
        {"type": "content_block_stop", "index": 0},
    ]
    message, raw_inputs, problem = _anth_finish(*events, *_stop("tool_use"))
    assert problem is None
    assert _calls(anth.from_provider(message, raw_inputs)[0]) == [("toolu_a", "f", {})]


# --- classification rules ----------------------------------------------------------------


def test_chat_forced_tool_choice_reports_stop_with_tool_calls() -> None:
    response = _chat_response(_tc("call_a", '{"x": 1}'))
    response["choices"][0]["finish_reason"] = "stop"
    assert _calls(chat.from_provider(response)[0]) == [("call_a", "f", {"x": 1})]


def test_anthropic_tool_use_block_with_end_turn_is_not_executed() -> None:
    event, items = anth.from_provider(_anth_message(_tu("toolu_a"), stop="end_turn"))
    assert isinstance(event, Incomplete) and event.reason == "other" and items == []


def test_responses_function_call_item_not_completed() -> None:
    response = {"status": "completed", "output": [_fc("a") | {"status": "incomplete"}]}
    event, _ = resp.from_provider(response)
    assert isinstance(event, Incomplete) and event.reason == "other"


def test_settle_prefers_specific_response_reason_and_stream_failures() -> None:
    stream_ended = Incomplete(reason="stream_ended")
    failed = RequestFailed(kind="overloaded", message="x", retryable=True)
    tools = ToolRequests(calls=_as_requests(chat.from_provider(_chat_response(_tc("a")))[0]).calls)
    assert settle(tools, None) is tools
    assert settle(tools, stream_ended) is stream_ended
    assert settle(Incomplete(reason="max_tokens"), stream_ended) == Incomplete(reason="max_tokens")
    assert settle(Incomplete(reason="other"), stream_ended) is stream_ended
    assert settle(FinalAnswer(text="hi"), failed) is failed


def test_requests_per_protocol() -> None:
    spec = ToolSpec("f", "does f", {"type": "object"})
    turn = TurnInput(
        model="m", history=[{"role": "user", "content": "hi"}], tools=[spec], instructions="sys"
    )
    a = anth.to_provider(turn, stream=True)
    assert a["max_tokens"] == anth.DEFAULT_MAX_TOKENS and a["system"] == "sys"
    assert a["tools"] == [
        {"name": "f", "description": "does f", "input_schema": {"type": "object"}}
    ]
    limited = TurnInput(model="m", history=[], max_output_tokens=50)
    assert anth.to_provider(limited, stream=False)["max_tokens"] == 50
    c = chat.to_provider(turn, stream=True)
    assert c["messages"][0] == {"role": "system", "content": "sys"} and len(turn.history) == 1
    assert c["stream_options"] == {"include_usage": True}
    assert "stream_options" not in chat.to_provider(turn, stream=False)
    assert chat.to_provider(limited, stream=True)["max_completion_tokens"] == 50
    r = resp.to_provider(turn, stream=True)
    assert r["input"] == turn.history and r["instructions"] == "sys"
    assert resp.to_provider(limited, stream=True)["max_output_tokens"] == 50


def test_initial_history_and_corrections() -> None:
    for api in ("openai-responses", "openai-chat", "anthropic-messages"):
        adapter = get_adapter(api)
        assert adapter.api == api
        assert adapter.initial_history("hi") == [{"role": "user", "content": "hi"}]
        assert adapter.correction_items("fix it") == [{"role": "user", "content": "fix it"}]
    with pytest.raises(ValueError, match="unknown provider api"):
        get_adapter("gemini")


def test_retry_after_headers() -> None:
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_events_round_trip_through_json() -> None:
    events: list[TurnEvent] = [
        FinalAnswer(text="hi"),
        _as_requests(chat.from_provider(_chat_response(_tc("a", '{"x": [1]}')))[0]),
        Incomplete(reason="max_tokens", detail="d"),
        RequestFailed(
            kind="rate_limited", message="m", status=429, retry_after_s=1.5, retryable=True
        ),
    ]
    for event in events:
        assert TURN_EVENT.validate_python(json.loads(json.dumps(event_to_json(event)))) == event
