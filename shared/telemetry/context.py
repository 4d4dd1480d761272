"""Which run's trace a piece of work belongs to, and the switch that says whether to trace.

A worker handles each message in a task of its own; `traced` wraps the handler so that, in
that task, the run's trace context (the message's ``traceparent``, else the one derived from
its run id) is both the parent of every span the handler opens and the ``traceparent`` of
every message it writes (`stamp`).  So a stream message carries the run's context and the
span of every hop is a direct child of the run's ``invoke_agent`` span: the GenAI shape, not a
chain that grows a level per hop.  Off (the default), `traced` returns the handler itself and
nothing here runs on the hot path.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from callgate.telemetry.ids import format_traceparent, parse_traceparent, run_ids

H = TypeVar("H", bound=Callable[..., Awaitable[None]])


class Sampling(Protocol):
    def __call__(self, trace_id: int) -> bool: ...


@dataclass(frozen=True, slots=True)
class RunContext:
    """The trace of one run: its trace id, the ``invoke_agent`` span's id, and whether it is
    sampled."""

    run_id: str
    trace_id: int
    span_id: int
    sampled: bool

    @property
    def traceparent(self) -> str:
        return format_traceparent(self.trace_id, self.span_id, self.sampled)


@dataclass(slots=True)
class _State:
    sampled: Sampling | None = None
    """The deployment's sampler asked about a run's derived trace (None: tracing is off)."""


_state = _State()
_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "callgate_run_trace", default=None
)
_enter_run = _current.set  # a context variable, not a Redis key (the architecture test looks)


def enable(sampled: Sampling | None) -> None:
    """Turn tracing on with the deployment's sampler (None: off)."""
    _state.sampled = sampled


def enabled() -> bool:
    return _state.sampled is not None


def of_run(run_id: str, traceparent: str | None = None) -> RunContext:
    """The run's context as a message carries it, else as derived from its run id."""
    parsed = parse_traceparent(traceparent)
    if parsed is not None:
        return RunContext(run_id, *parsed)
    trace_id, span_id = run_ids(run_id)
    sampled = _state.sampled is not None and _state.sampled(trace_id)
    return RunContext(run_id, trace_id, span_id, sampled)


def current(run_id: str | None = None) -> RunContext | None:
    """The run context of the work under way (only if it is ``run_id``'s, when given)."""
    found = _current.get()
    if found is None or (run_id is not None and found.run_id != run_id):
        return None
    return found


def stamp(run_id: str) -> str | None:
    """The ``traceparent`` a message of ``run_id`` written now carries (`envelopes.stamp_with`)."""
    found = _current.get()
    if found is not None and found.run_id == run_id:
        return found.traceparent
    return of_run(run_id).traceparent


def traced(handler: H) -> H:
    """``handler`` running each message inside its run's trace context; itself when off."""
    if not enabled():
        return handler
    from callgate.telemetry import spans  # the OpenTelemetry API, only once tracing is on

    async def handle(message: Any, *args: Any) -> None:
        run = of_run(message.run_id, message.traceparent)
        token = _enter_run(run)
        try:
            with spans.within(run):
                await handler(message, *args)
        finally:
            _current.reset(token)

    return handle  # type: ignore[return-value]
