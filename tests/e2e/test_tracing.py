"""Tracing end to end: real worker processes export OTLP/HTTP to a receiver this test runs, and
one run's spans — from model_turn, validator and executor — form one trace of the GenAI shape:
``invoke_agent callgate`` at the root, ``chat {model}`` per model request, the validation and
``execute_tool {tool}`` beside them, and the MCP client's ``tools/call {name}`` under the tool,
whose context reaches the real MCP server in ``_meta``.  Arguments are opted in as attributes
here, and a secret planted in one still appears in no span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.telemetry.ids import format_traceparent, run_ids
from tests.e2e.people import approve, status, until
from tests.e2e.test_mcp_tools import SCENARIOS as MCP_SCENARIOS
from tests.e2e.test_mcp_tools import McpHttpServer
from tests.otlp_receiver import OtlpServer, ReceivedSpan, Receiver

pytestmark = pytest.mark.slow

SECRET = "sk-PLANTEDsecret0123456789"
SCENARIO = {
    "description": "One MCP write whose argument carries a credential, then an answer.",
    "steps": [
        {
            "name": "note",
            "when": {"assistant_turns": 0},
            "tool_calls": [{"name": "shop__note", "arguments": {"text": f"key is {SECRET}"}}],
        },
        {"name": "answer", "when": {"results_for": ["shop__note"]}, "text": "Noted."},
    ],
}


class Traced:
    def __init__(self, system: LocalSystem, receiver: Receiver, shop: McpHttpServer) -> None:
        self.system, self.receiver, self.shop = system, receiver, shop


@pytest.fixture(scope="module")
def traced(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Traced]:
    scenarios = tmp_path_factory.mktemp("scenarios")
    (scenarios / "trace-note.json").write_text(json.dumps(SCENARIO))
    shop = McpHttpServer(tmp_path_factory.mktemp("shop"))
    shop.start()
    servers = [
        {
            "name": "shop",
            "url": shop.url,
            "trusted": True,
            "timeout_s": 1.5,
            "tools": {
                "cancel_order": {"lookup": "find_cancellation"},
                "set_price": {"approval": "events-lead", "resource_key": "item"},
            },
        }
    ]
    try:
        with OtlpServer() as receiver:
            env = {
                "CALLGATE_MCP_SERVERS": json.dumps(servers),
                "CALLGATE_TRACING": "1",
                "CALLGATE_TRACE_CONTENT": "1",
                "OTEL_BSP_SCHEDULE_DELAY": "50",
                "CALLGATE_STREAM_TRIM_S": "0",  # the run's messages stay to be read
                "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6]",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            }
            spec = SystemSpec(
                services=(),
                scripted_model=True,
                redis_url=redis_server.url,
                tool_modules=(),
                scenarios=(Path(scenarios), MCP_SCENARIOS),
                grace_s=3.0,
                env=env,
            )
            with LocalSystem(spec) as system:
                yield Traced(system, receiver, shop)
    finally:
        shop.stop()


async def _run(system: LocalSystem) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's view, and every message of it that went over a work stream."""
    spec = {
        "api": "openai-responses",
        "model": "trace-note",
        "input": "Go.",
        "identity": {"user": "alice"},
        "allowed_tools": ["shop__note"],
        "max_turns": 4,
    }
    async with CallgateClient(system.settings) as client:
        run_id = await client.submit(spec)
        await client.wait(run_id, 30)
        messages = []
        for kind in ("turns", "validate", "exec", "results"):
            stream = client.ledger.keys.run_stream(kind, run_id)
            for _, fields in await client.ledger.redis.xrange(stream):
                message = json.loads(fields[b"d"])
                if message["run_id"] == run_id:
                    messages.append(message)
        return await client.view(run_id), messages


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


async def test_one_run_is_one_trace_across_the_workers(traced: Traced) -> None:
    view, messages = await _run(traced.system)
    assert view["status"] == "completed", view
    trace_id = f"{run_ids(view['run_id'])[0]:032x}"
    # Every hop's message carries the run's context: turn 1, validate, exec, result, turn 2.
    assert sorted(m["kind"] for m in messages) == sorted(
        ["turn_request", "turn_request", "validate_request", "exec_request", "call_result"]
    )
    assert {m["traceparent"] for m in messages} == {
        format_traceparent(*run_ids(view["run_id"]), True)
    }

    def complete(spans: list[ReceivedSpan]) -> bool:
        names = {s.name for s in spans if s.trace_id == trace_id}
        return {
            "invoke_agent callgate",
            "execute_tool shop__note",
            "callgate.validate",
            "tools/call note",
        } <= names and sum(n.startswith("chat ") for n in names) >= 1

    traced.receiver.until(complete, 15)
    traced.receiver.until(
        lambda spans: (
            sum(s.name == "chat trace-note" and s.trace_id == trace_id for s in spans) == 2
        ),
        5,
    )
    spans = [s for s in traced.receiver.spans if s.trace_id == trace_id]

    root = _one(spans, "invoke_agent callgate")
    assert root.parent_id == "" and root.service == "callgate-model_turn"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["callgate.run.status"] == "completed"
    chats = sorted(
        (s for s in spans if s.name == "chat trace-note"),
        key=lambda s: s.attributes["callgate.turn"],
    )
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ["tool_call"],
        ["stop"],
    ]
    for chat in chats:
        assert chat.parent_id == root.span_id and chat.service == "callgate-model_turn"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "trace-note"
        assert chat.attributes["gen_ai.response.id"]
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    validate = _one(spans, "callgate.validate")
    assert validate.parent_id == root.span_id and validate.service == "callgate-validator"
    [(event, decision)] = validate.events
    assert event == "callgate.decision" and decision["callgate.validation.decision"] == "allowed"
    assert decision["callgate.effect"] == "write"
    tool = _one(spans, "execute_tool shop__note")
    assert tool.parent_id == root.span_id and tool.service == "callgate-executor"
    [call] = view["calls"]
    assert tool.attributes["gen_ai.tool.call.id"] == call["call_id"]
    assert tool.attributes["gen_ai.tool.type"] == "extension"
    assert tool.attributes["callgate.effect"] == "write"
    assert tool.attributes["callgate.effect.source"].startswith("default")
    assert tool.attributes["callgate.outcome"] == "succeeded"
    assert "[redacted]" in tool.attributes["gen_ai.tool.call.arguments"]  # opted in, redacted
    mcp = _one(spans, "tools/call note")
    assert mcp.parent_id == tool.span_id and mcp.attributes["mcp.method.name"] == "tools/call"

    # The trace reached the MCP server in the request's _meta.
    [commit] = [e for e in traced.shop.events() if e.get("tool") == "note"]
    assert commit["traceparent"].split("-")[1] == trace_id

    # The planted credential is in no span of any process, arguments opted in or not.
    assert SECRET in commit["text"]  # it did travel to the tool
    assert all(SECRET not in s.raw for s in traced.receiver.spans)
    assert all(SECRET.encode() not in body for body in traced.receiver.bodies)


def _trace_of(traced: Traced, run_id: str, names: set[str]) -> list[ReceivedSpan]:
    """The run's spans, once every one of ``names`` came."""
    trace_id = f"{run_ids(run_id)[0]:032x}"
    traced.receiver.until(
        lambda spans: names <= {s.name for s in spans if s.trace_id == trace_id}, 15
    )
    return [s for s in traced.receiver.spans if s.trace_id == trace_id]


async def test_approval_and_reconciliation_are_callgate_facts_in_the_trace(traced: Traced) -> None:
    async with CallgateClient(traced.system.settings) as client:
        priced = await client.submit(
            {
                "api": "openai-responses",
                "model": "mcp-price",
                "input": "Go.",
                "identity": {"user": "alice"},
                "max_turns": 4,
                "allowed_tools": ["shop__set_price"],
            }
        )
        await until(client, priced, status("paused_approval"))
        await approve(traced.system, client, priced)
        cancelled = await client.submit(
            {
                "api": "openai-responses",
                "model": "mcp-cancel",
                "input": "Go.",
                "identity": {"user": "alice"},
                "max_turns": 4,
                "allowed_tools": ["shop__cancel_order"],
            }
        )
        for run_id in (priced, cancelled):
            view = await until(client, run_id, status("completed", "failed", "handed_off"))
            assert view["status"] == "completed", view
        call = await client.ledger.get_call(priced, "t1.0")
    assert call is not None and call.approval_id is not None

    spans = _trace_of(traced, priced, {"invoke_agent callgate", "execute_tool shop__set_price"})
    [(_, decision)] = _one(spans, "callgate.validate").events
    assert decision["callgate.validation.decision"] == "needs_approval"
    assert decision["callgate.approval.id"] == call.approval_id
    tool = _one(spans, "execute_tool shop__set_price")
    assert tool.attributes["callgate.approval.id"] == call.approval_id
    assert tool.attributes["callgate.approval.wait_ms"] >= 0
    assert tool.attributes["callgate.effect.source"].startswith("annotation")

    spans = _trace_of(
        traced,
        cancelled,
        {
            "invoke_agent callgate",
            "execute_tool shop__cancel_order",
            "callgate.reconcile shop__cancel_order",
        },
    )
    root = _one(spans, "invoke_agent callgate")
    tool = _one(spans, "execute_tool shop__cancel_order")
    assert tool.attributes["callgate.outcome"] == "unknown"  # the answer was lost
    check = _one(spans, "callgate.reconcile shop__cancel_order")
    assert check.parent_id == root.span_id and check.service == "callgate-reconciler"
    assert check.attributes["callgate.reconcile.answer"] == "applied"
    lookup = _one(spans, "tools/call find_cancellation")
    assert lookup.parent_id == check.span_id
