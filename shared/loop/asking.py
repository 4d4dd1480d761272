"""model_turn's request for a turn: ask the model, ask again while the answer is a failure worth
retrying, and keep of the response what the ledger may hold (a response over the limits only as
a summary: a flood is never stored, nor ever resent).

It writes nothing but a retry's event (`note_retry`): model_turn takes the turn's step from what
the answer means.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import orjson

from callgate.config import Settings
from callgate.crashpoints import crash_point
from callgate.logs import log_fields
from callgate.loop.decisions import ModelStep, RetryModel, after_model, over_limits
from callgate.providers.base import FinalAnswer, ProviderAdapter, TurnInput, TurnOutcome
from callgate.records import RunRecord
from callgate.telemetry import spans
from callgate.tools.acceptance import check_acceptance

if TYPE_CHECKING:
    from callgate.streams.service import Runtime

log = logging.getLogger("callgate.model_turn")


async def ask_model(
    rt: Runtime, adapter: ProviderAdapter, run: RunRecord, history: list[bytes]
) -> tuple[TurnOutcome, ModelStep, bytes]:
    """The model's answer to this turn, what it means (after any retries), and the raw
    response as the ledger keeps it."""
    turn_input = TurnInput(
        model=run.model,
        history=[orjson.loads(item) for item in history],
        tools=rt.registry.specs(run.allowed_tools),
        instructions=run.instructions,
        max_output_tokens=rt.settings.max_output_tokens,
        timeout_s=rt.settings.model_timeout_s,
    )
    attempt = 0
    while True:
        attempt += 1
        with spans.chat(run.model, run.turn, turn_input.max_output_tokens):
            outcome = await adapter.complete(turn_input)
            spans.note_response(outcome)
        crash_point("model_turn.after_request")
        raw, flooded = kept_response(outcome, rt.settings)
        acceptance_error = None
        if isinstance(outcome.event, FinalAnswer) and flooded is None:
            acceptance_error = check_acceptance(
                run.acceptance, outcome.event.text, rt.registry.validators
            )
        step = after_model(
            run,
            outcome.event,
            attempt=attempt,
            max_retries=rt.settings.model_max_retries,
            acceptance_error=acceptance_error,
            over_limits=flooded,
        )
        if not isinstance(step, RetryModel):
            return outcome, step, raw
        await rt.ledger.apply(rt.ledger.note_retry(run, attempt, step.reason, step.delay_s))
        log.info(
            "model retry",
            extra=log_fields(
                run_id=run.run_id, turn=run.turn, reason=step.reason, delay_s=step.delay_s
            ),
        )
        await asyncio.sleep(step.delay_s)


def kept_response(outcome: TurnOutcome, settings: Settings) -> tuple[bytes, str | None]:
    """The raw response as the ledger keeps it, and why it is over the limits (then only a
    summary is kept: a flood is not stored, nor ever resent)."""
    raw = orjson.dumps(outcome.record)  # as `to_json()`, without deep-copying it
    flooded = over_limits(
        outcome.event,
        len(raw),
        max_calls=settings.max_calls_per_turn,
        max_bytes=settings.max_response_bytes,
    )
    if flooded is None:
        return raw, None
    kept = {
        "provider": outcome.record.provider,
        "api": outcome.record.api,
        "response_id": outcome.record.response_id,
        "omitted": flooded,
    }
    return orjson.dumps(kept), flooded
