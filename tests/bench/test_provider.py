"""The benchmark's in-process provider against the real adapter through its SDK and the
scripted model server: the same events and the same provider-native history, turn by turn,
for each protocol — so what the benchmark measures downstream is what users run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from callgate.ops.bench.provider import in_process
from callgate.ops.bench.tools import TOOLS
from callgate.providers import get_adapter
from callgate.providers.base import ProviderAdapter, ToolResultInput, TurnInput
from callgate.standins.scripted_model import ScriptedModelServer

APIS = ("openai-responses", "openai-chat", "anthropic-messages")
IDS = {"id", "call_id", "tool_call_id", "tool_use_id"}
SPECS = [t.spec() for t in TOOLS]


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ScriptedModelServer]:
    async with ScriptedModelServer() as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.openai_base_url)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", s.anthropic_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "scripted-local")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-local")
        yield s


def _without_ids(value: Any) -> Any:
    """Ids are random per response; everything else must match."""
    if isinstance(value, dict):
        return {k: "<id>" if k in IDS else _without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


async def _conversation(adapter: ProviderAdapter) -> tuple[list[str], list[Any]]:
    """Run bench-parallel to its answer; (event kinds, history)."""
    history = adapter.initial_history("read the values")
    kinds: list[str] = []
    while not kinds or kinds[-1] == "tool_requests":
        outcome = await adapter.complete(
            TurnInput(model="bench-parallel", history=history, tools=SPECS)
        )
        kinds.append(outcome.event.kind)
        history += outcome.record.assistant_items
        calls = getattr(outcome.event, "calls", ())
        results = [ToolResultInput(c.provider_call_id, f'{{"got": "{c.name}"}}') for c in calls]
        history += adapter.result_items(results)
        assert len(kinds) < 10, kinds
    return kinds, history


@pytest.mark.parametrize("api", APIS)
async def test_same_events_and_history_as_the_sdk_path(
    api: str, server: ScriptedModelServer
) -> None:
    real_kinds, real_history = await _conversation(get_adapter(api))
    fake_kinds, fake_history = await _conversation(in_process(api))

    assert real_kinds == fake_kinds == ["tool_requests"] * 5 + ["final_answer"]
    assert _without_ids(fake_history) == _without_ids(real_history)


async def test_a_request_the_api_would_refuse_fails_like_the_api(
    server: ScriptedModelServer,
) -> None:
    adapter = in_process("openai-chat")
    broken = [{"role": "tool", "tool_call_id": "call_nowhere", "content": "{}"}]
    outcome = await adapter.complete(TurnInput(model="bench-parallel", history=broken))
    assert outcome.event.kind == "bad_request"
    unknown = await adapter.complete(
        TurnInput(model="no-such-scenario", history=adapter.initial_history("hi"))
    )
    assert unknown.event.kind == "bad_request"
