"""The spans callgate makes, named and attributed per the OpenTelemetry GenAI conventions.

``invoke_agent callgate`` is a run (`run_ended`), ``chat {gen_ai.request.model}`` one model
request (`chat`), ``execute_tool {gen_ai.tool.name}`` one call (`execute_tool`) and
``tools/call {name}`` one MCP request (`mcp_call`), which carries the trace to the server in
``params._meta``.  What callgate itself decides — validation, approvals, effects, outcomes,
reconciliation — is under ``callgate.*``.  Arguments and results are attributes only with
``CALLGATE_TRACE_CONTENT=1``, and then redacted by the event log's own pass
(`callgate.redact`).  Every helper is a no-op while tracing is off; the services call them
unconditionally.  Values come from the neutral events the adapters return: nothing here
knows a provider.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace import TraceFlags as Flags

from callgate.records import CallOutcome, OkResult, result_code
from callgate.redact import redact
from callgate.telemetry.context import RunContext, current, of_run

if TYPE_CHECKING:
    from callgate.providers.base import TurnOutcome
    from callgate.records import RunRecord

AGENT_NAME = "callgate"
TERMINAL_RUN_STATES = frozenset({"completed", "failed", "refused", "handed_off", "cancelled"})
FINISH_REASONS: Mapping[str, str] = {
    "final_answer": "stop",
    "tool_requests": "tool_call",
    "refused": "content_filter",
    "max_tokens": "length",
    "content_filter": "content_filter",
}
"""Neutral outcome → the convention's finish reason; anything else is ``error``."""


@dataclass(slots=True)
class _Tracing:
    tracer: trace.Tracer | None = None
    content: bool = False
    """Arguments and results as (redacted) attributes: ``CALLGATE_TRACE_CONTENT``."""


_on = _Tracing()
_OFF = contextlib.nullcontext()
"""What every span helper returns while tracing is off (reusable: it holds nothing)."""
FORCED_IDS: ContextVar[tuple[int, int] | None] = ContextVar("callgate_forced_ids", default=None)
"""The ids the next span gets (the run's own `invoke_agent` span; `setup.RunIdGenerator`)."""
_force_ids = FORCED_IDS.set  # a context variable, not a Redis key (the architecture test looks)


def enable(tracer: trace.Tracer | None, *, content: bool = False) -> None:
    _on.tracer, _on.content = tracer, content


def enabled() -> bool:
    return _on.tracer is not None


@contextlib.contextmanager
def within(run: RunContext) -> Iterator[None]:
    """Make the run's ``invoke_agent`` span the parent of every span opened inside."""
    flags = Flags(Flags.SAMPLED if run.sampled else Flags.DEFAULT)
    parent = NonRecordingSpan(SpanContext(run.trace_id, run.span_id, True, flags))
    token = otel_context.attach(trace.set_span_in_context(parent))
    try:
        yield
    finally:
        otel_context.detach(token)


def _span(name: str, kind: SpanKind, attributes: dict[str, Any]) -> Any:
    tracer = _on.tracer
    if tracer is None:
        return _OFF
    kept = {k: v for k, v in attributes.items() if v is not None}
    return tracer.start_as_current_span(name, kind=kind, attributes=kept)


def _note(attributes: Mapping[str, Any]) -> None:
    """Add attributes to the span under way (nothing when off or not recording)."""
    if _on.tracer is not None:
        trace.get_current_span().set_attributes(
            {k: v for k, v in attributes.items() if v is not None}
        )


def content(data: Any, sensitive: Collection[str] = frozenset()) -> str | None:
    """``data`` as an attribute value, redacted exactly as the event log is; None unless the
    deployment opted in."""
    if not _on.content:
        return None
    return orjson.dumps(redact(data, sensitive), default=str).decode()


# -- a model request ------------------------------------------------------------------------


def chat(model: str, turn: int, max_tokens: int | None) -> Any:
    if _on.tracer is None:
        return _OFF
    return _span(
        f"chat {model}",
        SpanKind.CLIENT,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": max_tokens,
            "callgate.turn": turn,
        },
    )


def note_response(outcome: TurnOutcome) -> None:
    """What the model answered, from the adapter's neutral event and record."""
    if _on.tracer is None:
        return
    event, record = outcome.event, outcome.record
    reason = getattr(event, "reason", event.kind)
    span = trace.get_current_span()
    span.set_attributes(
        {
            k: v
            for k, v in {
                "gen_ai.provider.name": record.provider,
                "gen_ai.response.id": record.response_id,
                "gen_ai.response.finish_reasons": [FINISH_REASONS.get(reason, "error")],
                "gen_ai.usage.input_tokens": record.input_tokens,
                "gen_ai.usage.output_tokens": record.output_tokens,
                "callgate.outcome": event.kind,
            }.items()
            if v is not None
        }
    )
    if event.kind not in ("final_answer", "tool_requests"):
        span.set_attribute("error.type", reason)
        span.set_status(Status(StatusCode.ERROR))


# -- a tool call ----------------------------------------------------------------------------


def execute_tool(
    name: str,
    call_id: str,
    *,
    origin: str,
    effect: str,
    effect_source: str,
    attempt: int,
    arguments: Any = None,
    sensitive: Collection[str] = frozenset(),
) -> Any:
    if _on.tracer is None:
        return _OFF
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function" if origin == "local" else "extension",
        "callgate.call.id": call_id,
        "callgate.effect": effect,
        "callgate.effect.source": effect_source,
        "callgate.attempt": attempt,
    }
    shown = content(arguments, sensitive) if arguments is not None else None
    if shown is not None:
        attributes["gen_ai.tool.call.arguments"] = shown
    return _span(f"execute_tool {name}", SpanKind.INTERNAL, attributes)


def note_approval(approval_id: str, decided_ms: int | None, requested_ms: int | None) -> None:
    waited = None if decided_ms is None or requested_ms is None else decided_ms - requested_ms
    _note({"callgate.approval.id": approval_id, "callgate.approval.wait_ms": waited})


def note_outcome(
    state: str, result: CallOutcome | None, sensitive: Collection[str] = frozenset()
) -> None:
    """The call's outcome as recorded (``callgate.outcome``), its error code as ``error.type``,
    and — opted in — its result."""
    if _on.tracer is None:
        return
    code = None if result is None else result_code(result)
    shown = None
    if isinstance(result, OkResult):
        shown = content(result.payload, sensitive)
    _note(
        {
            "callgate.outcome": str(state),
            "callgate.result.code": code,
            "error.type": None if code in (None, "ok") else code,
            "gen_ai.tool.call.result": shown,
        }
    )
    if state == "failed":
        trace.get_current_span().set_status(Status(StatusCode.ERROR))


def mcp_call(server: str, name: str) -> Any:
    if _on.tracer is None:
        return _OFF
    return _span(
        f"tools/call {name}",
        SpanKind.CLIENT,
        {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "callgate.mcp.server": server,
        },
    )


def traced_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` with the current span's ``traceparent`` (MCP ``params._meta``); as is when off."""
    if _on.tracer is None:
        return meta
    carrier: dict[str, Any] = dict(meta or {})
    propagate.inject(carrier)
    return carrier or None


# -- callgate's own steps -------------------------------------------------------------------


def validated(turn: int, calls: list[tuple[str, str, Mapping[str, Any]]], started_ns: int) -> None:
    """One span for a turn's validation, with a ``callgate.decision`` event per call: its
    tool, call id and the fields the validator recorded for it."""
    tracer = _on.tracer
    if tracer is None:
        return
    span = tracer.start_span(
        "callgate.validate",
        kind=SpanKind.INTERNAL,
        start_time=started_ns,
        attributes={"callgate.turn": turn, "callgate.calls": len(calls)},
    )
    for tool, call_id, fields in calls:
        result = fields.get("result")
        span.add_event(
            "callgate.decision",
            {
                k: v
                for k, v in {
                    "gen_ai.tool.name": tool,
                    "callgate.call.id": call_id,
                    "callgate.validation.decision": fields.get("decision"),
                    "callgate.effect": fields.get("effect"),
                    "callgate.effect.source": fields.get("effect_source"),
                    "callgate.approval.id": fields.get("approval_id"),
                    "callgate.result.code": None if result is None else result_code(result),
                }.items()
                if v is not None
            },
        )
    span.end()


def reconcile(name: str, call_id: str, attempt: int) -> Any:
    if _on.tracer is None:
        return _OFF
    return _span(
        f"callgate.reconcile {name}",
        SpanKind.INTERNAL,
        {
            "gen_ai.tool.name": name,
            "callgate.call.id": call_id,
            "callgate.reconcile.attempt": attempt,
        },
    )


def note_reconciliation(answer: str) -> None:
    _note({"callgate.reconcile.answer": answer})


def run_ended(run: RunRecord, status: str) -> None:
    """The run's ``invoke_agent callgate`` span, once, by the worker that ends it: from the
    run's creation to now, with the ids every other span of the run names as parent."""
    tracer = _on.tracer
    if tracer is None or status not in TERMINAL_RUN_STATES:
        return
    ctx = current(run.run_id) or of_run(run.run_id)
    if not ctx.sampled:
        return
    token = _force_ids((ctx.trace_id, ctx.span_id))
    try:
        span = tracer.start_span(
            f"invoke_agent {AGENT_NAME}",
            context=otel_context.Context(),
            kind=SpanKind.INTERNAL,
            start_time=run.created_ms * 1_000_000 or None,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.conversation.id": run.run_id,
                "gen_ai.request.model": run.model,
                "callgate.run.id": run.run_id,
                "callgate.run.status": status,
                "callgate.run.turns": run.turn,
            },
        )
    finally:
        FORCED_IDS.reset(token)
    if status != "completed":
        span.set_status(Status(StatusCode.ERROR))
    span.end(time.time_ns())
