"""The loop's decisions, as pure functions of (state, event) -> next step.

No await, clock, Redis or SDK here: workers gather the facts (run record, provider outcome,
call records, the time), ask these functions what to do, and then make the answer durable
in one atomic step.  That keeps every decision unit-testable and replayable.
"""

from __future__ import annotations

from dataclasses import dataclass

from callgate.providers.base import (
    FinalAnswer,
    Incomplete,
    ProviderEvent,
    Refused,
    RequestFailed,
    ToolCallRequest,
    ToolRequests,
)
from callgate.records import CallRecord, RunRecord
from callgate.states import CALL_TERMINAL, CallState, RunState

RETRY_BASE_S = 0.5
RETRY_CAP_S = 30.0


@dataclass(frozen=True, slots=True)
class Finish:
    """End (or pause) the run in ``status`` with a final text or a reason."""

    status: RunState
    reason: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class StartCalls:
    """Record the requested calls and send them to the validator."""

    calls: tuple[ToolCallRequest, ...]
    text: str | None


@dataclass(frozen=True, slots=True)
class RetryModel:
    """Ask the model again for the same turn after ``delay_s``."""

    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class AskToFix:
    """The answer failed the run's acceptance check: tell the model why, take another turn."""

    message: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Not every call of the turn is terminal yet: nothing to do."""


@dataclass(frozen=True, slots=True)
class NextTurn:
    """Every call is terminal: append the results in provider order, request the next turn."""

    calls: tuple[CallRecord, ...]


ModelStep = Finish | StartCalls | RetryModel | AskToFix
ResultStep = Wait | NextTurn | Finish


def budget_end(run: RunRecord, now_ms: int) -> str | None:
    """Why the run may not take its current turn, or None if it may."""
    if run.turn > run.max_turns:
        return "turn budget reached"
    used = run.usage_input_tokens + run.usage_output_tokens
    if run.max_total_tokens is not None and used >= run.max_total_tokens:
        return "token budget reached"
    if run.deadline_ms is not None and now_ms >= run.deadline_ms:
        return "deadline reached"
    return None


def over_limits(
    event: ProviderEvent, response_bytes: int, *, max_calls: int, max_bytes: int
) -> str | None:
    """Why a response must not be acted on or kept whole (a model that floods the loop), or
    None: more tool calls than a turn may make, or more bytes than a response may hold."""
    if response_bytes > max_bytes:
        return f"response too large: {response_bytes} bytes, at most {max_bytes}"
    if isinstance(event, ToolRequests) and len(event.calls) > max_calls:
        return f"too many tool calls: {len(event.calls)}, at most {max_calls} per turn"
    return None


def retry_delay_s(attempt: int, retry_after_s: float | None) -> float:
    """Exponential back-off from the attempt number, never sooner than the server asked."""
    backoff = min(RETRY_CAP_S, RETRY_BASE_S * 2.0 ** max(0, attempt - 1))
    return min(RETRY_CAP_S, max(backoff, retry_after_s or 0.0))


def after_model(
    run: RunRecord,
    event: ProviderEvent,
    *,
    attempt: int,
    max_retries: int,
    acceptance_error: str | None,
    over_limits: str | None = None,
) -> ModelStep:
    """What to do with one classified model response.

    ``attempt`` counts requests for this turn (1 = first); ``acceptance_error`` is the
    reason a final answer failed the run's acceptance check (None = accepted);
    ``over_limits`` why the response is unusable whatever it says (`over_limits`).
    """
    if over_limits is not None:
        return Finish(RunState.PAUSED_INCOMPLETE, reason=over_limits)
    match event:
        case FinalAnswer(text=text):
            if acceptance_error is None:
                return Finish(RunState.COMPLETED, text=text)
            if run.turn < run.max_turns:
                return AskToFix(acceptance_error)
            return Finish(
                RunState.HANDED_OFF, reason=f"answer failed acceptance: {acceptance_error}"
            )
        case ToolRequests(calls=calls, text=text):
            return StartCalls(calls, text)
        case Refused(message=message):
            return Finish(RunState.REFUSED, reason=message or "model refused")
        case Incomplete(reason=reason, detail=detail):
            return Finish(
                RunState.PAUSED_INCOMPLETE, reason=f"{reason}: {detail}" if detail else reason
            )
        case RequestFailed() as failed:
            if failed.retryable and attempt <= max_retries:
                return RetryModel(retry_delay_s(attempt, failed.retry_after_s), failed.kind)
            if failed.retryable:
                return Finish(RunState.HANDED_OFF, reason=f"model unavailable: {failed.kind}")
            return Finish(RunState.FAILED, reason=f"{failed.kind}: {failed.message}")
    raise TypeError(f"unexpected provider event {event!r}")


def after_results(calls: tuple[CallRecord, ...]) -> ResultStep:
    """Decide, from every call of one turn, whether the next turn may start."""
    if any(call.state == CallState.UNRESOLVED for call in calls):
        return Finish(RunState.PAUSED_UNKNOWN_OUTCOME, reason="write outcome unknown")
    if all(call.state in CALL_TERMINAL for call in calls):
        return NextTurn(tuple(sorted(calls, key=lambda call: call.index)))
    return Wait()
