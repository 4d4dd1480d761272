"""Tracing for one worker process: off unless ``CALLGATE_TRACING=1``, then the OpenTelemetry
SDK configured by the standard ``OTEL_*`` variables (README "Tracing").

The exporter is OTLP over HTTP/protobuf (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``…_HEADERS``,
``…_TIMEOUT``; ``OTEL_TRACES_EXPORTER=console`` prints spans, ``none`` drops them), the sampler
``OTEL_TRACES_SAMPLER``/``…_ARG`` (default parent-based always-on), batching ``OTEL_BSP_*``.
The service name is ``callgate-<worker kind>``; ``OTEL_RESOURCE_ATTRIBUTES`` adds to the
resource.  This module is imported only when tracing is on: the SDK stays off the hot path.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind

from callgate import envelopes
from callgate.errors import TracingConfigError
from callgate.telemetry import context, spans

PROTOCOLS = ("http/protobuf",)
EXPORTERS = ("otlp", "console", "none")


class RunIdGenerator(RandomIdGenerator):
    """Random ids, except for a run's own ``invoke_agent`` span, whose ids derive from the run
    (`spans.FORCED_IDS`) so that every worker's spans of that run name it as their parent."""

    def generate_span_id(self) -> int:
        forced = spans.FORCED_IDS.get()
        return forced[1] if forced is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        forced = spans.FORCED_IDS.get()
        return forced[0] if forced is not None else super().generate_trace_id()


def _exporter() -> SpanExporter | None:
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if name not in EXPORTERS:
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={name!r}: callgate exports {', '.join(EXPORTERS)}"
        )
    if name == "none":
        return None
    if name == "console":
        return ConsoleSpanExporter()
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: callgate sends "
            "OTLP as http/protobuf (point it at the collector's HTTP "
            "port, 4318)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def start(
    service: str, *, enabled: bool, content: bool = False, processor: SpanProcessor | None = None
) -> TracerProvider | None:
    """Turn tracing on for this process as ``callgate-<service>`` (nothing when not
    ``enabled``).  ``processor``: where spans go instead of the configured exporter (tests,
    the benchmark).  `TracingConfigError` for a setting callgate cannot honour."""
    if not enabled:
        return None
    own_processor = processor is None
    if processor is None:
        exporter = _exporter()
        processor = (
            SimpleSpanProcessor(_Nothing()) if exporter is None else BatchSpanProcessor(exporter)
        )
    resource = Resource.create({"service.name": f"callgate-{service}"})
    provider = TracerProvider(resource=resource, id_generator=RunIdGenerator())
    provider.add_span_processor(processor)
    if own_processor:  # the MCP SDK's spans too; a test's or the benchmark's keep theirs
        trace.set_tracer_provider(provider)
    sampler = provider.sampler

    def sampled(trace_id: int) -> bool:
        decision = sampler.should_sample(None, trace_id, "invoke_agent callgate", SpanKind.INTERNAL)
        return decision.decision is Decision.RECORD_AND_SAMPLE

    context.enable(sampled)
    spans.enable(provider.get_tracer("callgate"), content=content)
    envelopes.stamp_with(context.stamp)
    return provider


def stop(provider: TracerProvider | None) -> None:
    """Send what is buffered and turn tracing off (safe to call twice)."""
    spans.enable(None)
    context.enable(None)
    envelopes.stamp_with(None)
    if provider is not None:
        provider.shutdown()


class _Nothing(SpanExporter):
    """``OTEL_TRACES_EXPORTER=none``: spans are made (and sampled) but go nowhere."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS
