"""The benchmark's in-process provider against the real adapter through its SDK and the
scripted model server: the same events and the same provider-native history, turn by turn,
for each protocol — so what the benchmark measures downstream is what users run."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from callgate.ops.bench.provider import (
    MODEL_CPU_DIR_ENV,
    InProcessModel,
    InProcessResponses,
    in_process,
    stand_in_seconds,
)
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


async def test_the_stand_in_reports_the_cpu_it_spent_and_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model_turn's CPU in the benchmark holds the stand-in's answers; the file it keeps lets
    the benchmark take them out (the throughput scenario's runtime figure)."""
    monkeypatch.setenv(MODEL_CPU_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "bench-local")  # the SDK client is built, never used
    adapter = InProcessResponses(stream=False)
    adapter.model = InProcessModel()
    assert stand_in_seconds(str(tmp_path)) == 0.0

    started = time.thread_time()
    await _conversation(adapter)
    whole_conversation = time.thread_time() - started

    reported = stand_in_seconds(str(tmp_path))
    assert reported == adapter.model.cpu.spent_ns / 1e9
    assert 0 < reported < whole_conversation  # the adapter's own work is not the stand-in's
