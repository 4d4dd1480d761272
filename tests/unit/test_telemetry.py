"""Tracing in one process, with the SDK's in-memory exporter: off, nothing is made and no
message carries a trace; on, a handler's spans join the trace its message names and every
message it writes carries that trace on; content is an attribute only when opted in, and
then redacted as the event log is."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from callgate.envelopes import CallResult, ExecRequest, TurnRequest, decode, encode
from callgate.errors import EnvelopeError
from callgate.records import RunRecord, ok_result
from callgate.telemetry import setup, spans
from callgate.telemetry.context import traced
from callgate.telemetry.ids import format_traceparent, run_ids

FOREIGN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SECRET = "sk-PLANTEDsecret0123456789"


def _start(content: bool = False) -> tuple[TracerProvider, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = setup.start(
        "test", enabled=True, content=content, processor=SimpleSpanProcessor(exported)
    )
    assert provider is not None
    return provider, exported


@pytest.fixture
def tracing() -> Iterator[InMemorySpanExporter]:
    provider, exported = _start()
    yield exported
    setup.stop(provider)


def _make_every_span() -> None:
    run = RunRecord(run_id="r1", api="openai-responses", model="m", input="hi", turn=1)
    with spans.chat("m", 1, 100):
        pass
    with spans.execute_tool(
        "t",
        "t1.0",
        origin="local",
        effect="read",
        effect_source="declared",
        attempt=1,
        arguments={"q": 1},
    ):
        spans.note_outcome("succeeded", ok_result({"a": 1}))
    with spans.mcp_call("shop", "note"):
        assert spans.traced_meta(None) is None
    spans.validated(1, [("t", "t1.0", {"decision": "allowed"})], 0)
    spans.run_ended(run, "completed")


async def test_off_no_span_is_made_and_no_message_carries_a_trace() -> None:
    provider, exported = _start()
    setup.stop(provider)  # on, then off: what the helpers do now is what "off" does
    _make_every_span()
    seen: list[bytes] = []

    async def handler(message: TurnRequest, delivery: object) -> None:
        seen.append(encode(TurnRequest(run_id=message.run_id, turn=2)))

    assert traced(handler) is handler  # off: the handler itself, nothing wrapped around it
    await traced(handler)(TurnRequest(run_id="r1", turn=1), None)
    assert exported.get_finished_spans() == ()
    assert "traceparent" not in orjson.loads(seen[0])
    assert "traceparent" not in orjson.loads(
        encode(ExecRequest(run_id="r1", turn=1, call_id="t1.0"))
    )


async def test_a_handler_joins_its_message_s_trace_and_passes_it_on(
    tracing: InMemorySpanExporter,
) -> None:
    written: list[dict[str, object]] = []

    async def handler(message: TurnRequest, delivery: object) -> None:
        with spans.chat("m", 1, None):
            written.append(
                orjson.loads(
                    encode(
                        CallResult(run_id=message.run_id, turn=1, call_id="t1.0", state="succeeded")
                    )
                )
            )
            written.append(orjson.loads(encode(TurnRequest(run_id="other", turn=1))))

    await traced(handler)(
        decode(encode(TurnRequest(run_id="r1", turn=1, traceparent=FOREIGN))), None
    )
    [chat] = tracing.get_finished_spans()
    assert chat.context is not None and chat.parent is not None
    assert f"{chat.context.trace_id:032x}" == FOREIGN.split("-")[1]
    assert f"{chat.parent.span_id:016x}" == FOREIGN.split("-")[2]
    # The run's context goes on in what the handler writes; another run's is its own.
    assert written[0]["traceparent"] == FOREIGN
    assert written[1]["traceparent"] == format_traceparent(*run_ids("other"), True)


async def test_without_a_traceparent_the_run_s_trace_is_derived_and_its_root_named(
    tracing: InMemorySpanExporter,
) -> None:
    run = RunRecord(
        run_id="r7", api="openai-responses", model="m", input="hi", turn=2, created_ms=1_000
    )

    async def handler(message: TurnRequest, delivery: object) -> None:
        with spans.chat("m", 2, None):
            pass
        spans.run_ended(run, "completed")

    await traced(handler)(TurnRequest(run_id="r7", turn=2), None)
    chat, root = tracing.get_finished_spans()
    trace_id, span_id = run_ids("r7")
    assert root.name == "invoke_agent callgate" and root.parent is None
    assert root.context is not None and chat.parent is not None
    assert (root.context.trace_id, root.context.span_id) == (trace_id, span_id)
    assert chat.parent.span_id == span_id and root.start_time == 1_000 * 1_000_000


def test_a_malformed_traceparent_is_refused_like_any_bad_field() -> None:
    body = orjson.loads(encode(TurnRequest(run_id="r1", turn=1)))
    body["traceparent"] = "00-zz-1-01"
    with pytest.raises(EnvelopeError):
        decode(orjson.dumps(body))


def _arguments_of(exported: InMemorySpanExporter) -> str | None:
    with spans.execute_tool(
        "t",
        "t1.0",
        origin="local",
        effect="write",
        effect_source="declared",
        attempt=1,
        arguments={"text": f"key {SECRET}", "pin": "1234"},
        sensitive={"pin"},
    ):
        spans.note_outcome("succeeded", ok_result({"echo": SECRET}), {"pin"})
    [span] = exported.get_finished_spans()
    assert span.attributes is not None
    assert SECRET not in str(dict(span.attributes))
    value = span.attributes.get("gen_ai.tool.call.arguments")
    return None if value is None else str(value)


def test_arguments_are_attributes_only_opted_in_and_then_redacted() -> None:
    provider, exported = _start(content=False)
    try:
        assert _arguments_of(exported) is None
    finally:
        setup.stop(provider)
    provider, exported = _start(content=True)
    try:
        shown = _arguments_of(exported)
        assert shown is not None
        assert orjson.loads(shown) == {"text": "key [redacted]", "pin": "[redacted]"}
    finally:
        setup.stop(provider)
