"""Each adapter, through its official SDK, against the strict scripted model server: every
scenario yields the same internal event on all three protocols, and no partial call ever
surfaces as a tool request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from callgate.providers import anthropic_messages, get_adapter, openai_chat, openai_responses
from callgate.providers.adapter import SdkAdapter
from callgate.providers.base import ToolResultInput, TurnInput, TurnOutcome
from callgate.standins.scripted_model import ScriptedModelServer
from callgate.tools.contract import ToolSpec

APIS = ("openai-responses", "openai-chat", "anthropic-messages")
PROTOCOLS = {
    "openai-responses": openai_responses,
    "openai-chat": openai_chat,
    "anthropic-messages": anthropic_messages,
}
WEATHER = {"name": "get_weather", "arguments": {"city": "Hangzhou 杭州 🌧"}}
TRAIN = {"name": "get_train", "arguments": {"train_number": "G1234"}}
TOOLS = [
    ToolSpec(
        "get_weather",
        "Weather",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "get_train",
        "Train",
        {
            "type": "object",
            "properties": {"train_number": {"type": "string"}},
            "additionalProperties": False,
        },
    ),
]


def step(fault: dict[str, Any] | None = None, **say: Any) -> dict[str, Any]:
    return {
        "steps": [
            {
                "name": "only",
                "when": {"assistant_turns": 0},
                **say,
                **({"fault": fault} if fault else {}),
            }
        ]
    }


CASES: dict[str, tuple[dict[str, Any], str, str | None]] = {
    # name: (scenario, expected event kind, expected detail: reason / failure kind)
    "final_answer": (step(text="All good."), "final_answer", None),
    "one_call": (step(tool_calls=[WEATHER]), "tool_requests", None),
    "two_parallel_interleaved": (
        step({"type": "interleave_arguments"}, tool_calls=[WEATHER, TRAIN]),
        "tool_requests",
        None,
    ),
    "one_char_fragments_utf8": (
        step({"type": "char_fragments"}, tool_calls=[WEATHER, TRAIN]),
        "tool_requests",
        None,
    ),
    "truncated_mid_arguments": (
        step({"type": "truncate"}, tool_calls=[WEATHER]),
        "incomplete",
        "max_tokens",
    ),
    "refusal": (step({"type": "refusal"}, text="x"), "refused", None),
    "invalid_json_arguments": (
        step({"type": "invalid_json_arguments"}, tool_calls=[WEATHER]),
        "incomplete",
        None,
    ),
    "duplicate_call_ids": (
        step({"type": "duplicate_call_ids"}, tool_calls=[WEATHER, TRAIN]),
        "incomplete",
        "duplicate_call_id",
    ),
    "dropped_mid_stream": (
        step({"type": "drop", "after_events": 3}, tool_calls=[WEATHER]),
        "transport_error",
        None,
    ),
    "rate_limited": (
        step({"type": "http_429", "retry_after_s": 2}, text="x"),
        "rate_limited",
        None,
    ),
    "server_error": (step({"type": "http_500"}, text="x"), "server_error", None),
    "overloaded": (step({"type": "overloaded"}, text="x"), None, None),
}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as srv:
        for name, (scenario, _, _) in CASES.items():
            srv.add_scenario(f"case-{name}", scenario)
        srv.add_scenario(
            "round-trip",
            {
                "steps": [
                    {"name": "ask", "when": {"assistant_turns": 0}, "tool_calls": [WEATHER, TRAIN]},
                    {
                        "name": "answer",
                        "when": {"results_for": ["get_weather", "get_train"]},
                        "text": "W={result:get_weather} T={result:get_train}",
                    },
                ]
            },
        )
        yield srv


async def complete(
    server: ScriptedModelServer,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    model: str,
    history: list[dict[str, Any]] | None = None,
) -> TurnOutcome:
    adapter = adapter_on(server, monkeypatch, api)
    try:
        return await adapter.complete(turn_input(adapter, model, history))
    finally:
        await adapter.aclose()


def adapter_on(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, api: str
) -> SdkAdapter[Any, Any]:
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-local")
    return get_adapter(api)


def turn_input(
    adapter: SdkAdapter[Any, Any], model: str, history: list[dict[str, Any]] | None
) -> TurnInput:
    return TurnInput(
        model=model,
        history=history or adapter.initial_history("hi"),
        tools=TOOLS,
        instructions=None,
        max_output_tokens=256,
        timeout_s=10,
    )


@pytest.mark.parametrize("api", APIS)
async def test_closing_an_adapter_closes_the_client_its_turn_used(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """model_turn closes its SDK clients on shutdown, inside its loop: left to the garbage
    collector, they close after the loop ended, and fail ("Event loop is closed")."""
    adapter = adapter_on(server, monkeypatch, api)
    await adapter.complete(turn_input(adapter, "case-final_answer", None))
    client = adapter.client
    assert not client.is_closed()
    await adapter.aclose()
    assert client.is_closed()
    assert adapter.client is not client  # a later turn makes a new one
    await adapter.aclose()


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("case", sorted(CASES))
async def test_scenario_yields_the_same_event_on_every_protocol(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, case: str, api: str
) -> None:
    _, kind, detail = CASES[case]
    outcome = await complete(server, monkeypatch, api, f"case-{case}")
    event = outcome.event
    if case == "overloaded":  # 529 on Anthropic, 503 on OpenAI: both a retryable failure
        assert event.kind in ("overloaded", "server_error") and event.retryable  # type: ignore[union-attr]
        return
    assert event.kind == kind, event
    if detail is not None and kind == "incomplete":
        assert event.reason == detail  # type: ignore[union-attr]
    if kind == "tool_requests":
        calls = event.calls  # type: ignore[union-attr]
        expected = CASES[case][0]["steps"][0]["tool_calls"]
        assert [(c.name, c.arguments) for c in calls] == [
            (t["name"], t["arguments"]) for t in expected
        ]
        assert len({c.provider_call_id for c in calls}) == len(calls)
    if kind == "rate_limited":
        assert event.retry_after_s == 2  # type: ignore[union-attr]
    if kind != "tool_requests":
        assert not outcome.record.assistant_items or kind in ("final_answer", "refused")


@pytest.mark.parametrize("api", APIS)
async def test_history_round_trip_is_accepted_and_a_broken_one_rejected(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    first = await complete(server, monkeypatch, api, "round-trip")
    adapter = get_adapter(api)
    calls = first.event.calls  # type: ignore[union-attr]
    results = [ToolResultInput(c.provider_call_id, f"result-of-{c.name}", False) for c in calls]
    history = [*adapter.initial_history("hi"), *first.record.assistant_items]
    answer = await complete(
        server, monkeypatch, api, "round-trip", [*history, *adapter.result_items(results)]
    )
    assert answer.event.kind == "final_answer"
    assert answer.event.text == "W=result-of-get_weather T=result-of-get_train"  # type: ignore[union-attr]
    broken = await complete(
        server, monkeypatch, api, "round-trip", [*history, *adapter.result_items(results[:1])]
    )
    assert broken.event.kind == "bad_request"
    assert calls[1].provider_call_id in broken.event.message  # type: ignore[union-attr]


@pytest.mark.parametrize("api", APIS)
async def test_the_wire_body_is_the_request_the_adapter_built(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """History and tools reach the wire exactly as built, whichever way the adapter hands
    them to its SDK (`sdk_arguments` sends them unwalked, over placeholders)."""
    first = await complete(server, monkeypatch, api, "round-trip")
    adapter = get_adapter(api)
    calls = first.event.calls  # type: ignore[union-attr]
    results = [ToolResultInput(c.provider_call_id, f"result-of-{c.name}", False) for c in calls]
    history = [
        *adapter.initial_history("hi"),
        *first.record.assistant_items,
        *adapter.result_items(results),
    ]
    await complete(server, monkeypatch, api, "round-trip", history)
    turn = TurnInput("round-trip", history, TOOLS, None, 256, 10)
    built = PROTOCOLS[api].to_provider(turn, stream=True)
    assert server.log[-1]["body"] == json.loads(json.dumps(built))
