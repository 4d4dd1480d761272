"""Mutations of the guards the explorer must catch: each breaks one guard, only inside a test
(`pytest.MonkeyPatch`), never in the package."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from callgate.ledger import control_steps
from callgate.ledger.steps import LoopSteps
from callgate.services import executor, model_turn, reconciler
from callgate.states import CallState, call_sources
from callgate.tools.contract import Reconciliation


def already_taken(mp: pytest.MonkeyPatch) -> None:
    """The take's compare-and-set accepts a call that is already ``executing``: an exec order
    carrying ``allowed`` takes a call another delivery has in flight."""
    original = LoopSteps.take_call

    def take_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        real = self.call_transition

        def widened(
            tx: Any, run_id: str, call_id: str, sources: Any, to: Any, *more: Any, **options: Any
        ) -> Any:
            if to == CallState.EXECUTING:
                sources = call_sources(CallState.EXECUTING)
            return real(tx, run_id, call_id, sources, to, *more, **options)

        self.call_transition = widened
        try:
            return original(self, *args, **kwargs)
        finally:
            del self.call_transition

    mp.setattr(LoopSteps, "take_call", take_call)


def approval_not_consumed(mp: pytest.MonkeyPatch) -> None:
    """The take no longer consumes the approval it runs under."""
    original = LoopSteps.take_call

    def take_call(
        self: Any,
        run_id: str,
        call_id: str,
        facts: Any,
        attempt: int,
        consumer: str,
        consume: str | None = None,
    ) -> Any:
        return original(self, run_id, call_id, facts, attempt, consumer, None)

    mp.setattr(LoopSteps, "take_call", take_call)


def ack_before_settling(mp: pytest.MonkeyPatch) -> None:
    """The executor acks its order as soon as it gets it, before the step that settles it."""
    original = executor.Executor.handle

    async def handle(self: Any, message: Any, delivery: Any) -> None:
        await self.rt.redis.xack(delivery.stream, delivery.group, delivery.message_id)
        await original(self, message, delivery)

    mp.setattr(executor.Executor, "handle", handle)


def reconciler_replays(mp: pytest.MonkeyPatch) -> None:
    """The reconciler sends the write again instead of looking it up."""

    async def ask(self: Any, run: Any, call: Any, tool: Any, attempt: int) -> Reconciliation:
        ctx = reconciler.call_context(run, call, self.session, attempt)
        payload = await tool.execute(
            ctx, tool.validate(call.arguments or {}), call.operation_id or ""
        )
        return Reconciliation("applied", payload)

    mp.setattr(reconciler.Reconciler, "_ask", ask)


def cancel_leaves_queued_writes(mp: pytest.MonkeyPatch) -> None:
    """A cancel no longer stops calls allowed or approved but not yet taken."""
    mp.setattr(
        control_steps, "NOT_STARTED", frozenset({CallState.REQUESTED, CallState.NEEDS_APPROVAL})
    )


def result_under_wrong_id(mp: pytest.MonkeyPatch) -> None:
    """model_turn hands a call's result back under its sibling's provider call id."""
    original = model_turn.result_input

    def result_input(call: Any) -> Any:
        made = original(call)
        head, _, index = made.provider_call_id.rpartition("_")
        return dataclasses.replace(made, provider_call_id=f"{head}_{1 - int(index) % 2}")

    mp.setattr(model_turn, "result_input", result_input)


MUTATIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "already_taken": already_taken,
    "approval_not_consumed": approval_not_consumed,
    "ack_before_settling": ack_before_settling,
    "reconciler_replays": reconciler_replays,
    "cancel_leaves_queued_writes": cancel_leaves_queued_writes,
    "result_under_wrong_id": result_under_wrong_id,
}
