"""The named steps of a run: start it, record what the model said, end or advance a turn (a
call's are `callgate.ledger.call_steps`; a write whose outcome is unknown goes on with
`callgate.ledger.reconcile_steps`).

Each builds one guarded `Tx` (see `callgate.ledger.base`); the services apply it, with their
message's ack, in one atomic step.  Steps that rely on a message's facts bind them
(`callgate.ledger.binding`) and return the `Binding`, so the caller can tell a stale or forged
message from a lost race.  A step that must know which keys a run made (to let them expire once
it ends) reads them first, so those steps are ``async``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from callgate.envelopes import TurnRequest, ValidateRequest
from callgate.facts import DecideFacts, UsageFacts
from callgate.ledger.binding import Binding, bind
from callgate.ledger.call_steps import CallSteps
from callgate.ledger.tx import Tx
from callgate.providers.base import TurnRecord
from callgate.records import CallRecord, RunRecord, error_result
from callgate.states import RUN_TERMINAL, CallState, RunState


def items_json(items: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """Provider-native history items as the ledger stores them (one JSON each)."""
    return [orjson.dumps(item) for item in items]


class LoopSteps(CallSteps):
    """The loop's run steps, over its call steps; `Ledger` mixes them in."""

    def start_run(self, run: RunRecord, history: Sequence[Mapping[str, Any]]) -> Tx:
        """Create ``run`` once with its first history items, indexes and turn-1 request."""
        key = self.keys.run(run.run_id)
        partition = self.keys.partition(run.run_id)
        tx = Tx("start_run").expect_missing(key).hset(key, run.to_hash())
        self.index_add(tx, self.keys.runs_index, run.run_id, {run.run_id: run.created_ms})
        if run.deadline_ms is not None:
            tx.zadd(self.keys.deadlines(partition), {run.run_id: float(run.deadline_ms)})
        if history:
            self.append_history(tx, run.run_id, items_json(history))
        self.event(
            tx,
            run.run_id,
            "run.created",
            api=run.api,
            model=run.model,
            status=run.status.value,
            allowed_tools=run.allowed_tools,
        )
        turn_1 = TurnRequest(run_id=run.run_id, turn=1, reason="start")
        return self.outbox(tx, self.keys.run_stream("turns", run.run_id), turn_1)

    def model_response(
        self,
        tx: Tx,
        run: RunRecord,
        record: TurnRecord,
        outcome: str,
        raw: bytes,
        binding: Binding | None = None,
    ) -> Tx:
        """The raw response of this turn (``raw``: the record as JSON, or only what is kept
        of one over the limits), its usage and its event (every end of a turn).

        The usage totals are a compare-and-set on ``run``'s (bound as facts: a step that
        fails it read stale totals), not HINCRBY, which made the script read each total
        again to prove the sum fits: four commands a turn, where this reads the totals
        with the run's other guarded fields and writes them in one HSET."""
        keys = self.keys
        raw_key, run_key = keys.raw_responses(run.run_id), keys.run(run.run_id)
        tx.vouch(raw_key).hset(raw_key, {str(run.turn): raw})
        bind(tx, run_key, UsageFacts.of(run), binding)
        totals = {
            "usage_input_tokens": run.usage_input_tokens + record.input_tokens,
            "usage_output_tokens": run.usage_output_tokens + record.output_tokens,
        }
        tx.hset(run_key, totals)
        return self.event(
            tx,
            run.run_id,
            "model.response",
            turn=run.turn,
            response_id=record.response_id,
            outcome=outcome,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
        )

    def expect_history(self, tx: Tx, run_id: str, length: int) -> Tx:
        """Guard on the history holding ``length`` items: it is append-only, so a turn that
        read (or carried) that many items saw exactly what the ledger holds."""
        return tx.expect_length(self.keys.history(run_id), length)

    async def finish_turn(
        self,
        tx: Tx,
        run: RunRecord,
        status: RunState,
        *,
        fields: Mapping[str, Any],
        shown: Mapping[str, Any],
        assistant: Sequence[bytes] = (),
    ) -> Tx:
        """End (or pause) the run at this turn; a terminal run's keys start to expire."""
        tx.step = "finish_turn"
        if assistant:
            self.append_history(tx, run.run_id, assistant)
        self.run_transition(
            tx,
            run.run_id,
            [RunState.AWAITING_MODEL],
            status,
            expect_turn=run.turn,
            fields=dict(fields),
            shown=dict(shown),
        )
        if status in RUN_TERMINAL:
            await self.retention(tx, run.run_id)
        return tx

    def start_calls(
        self,
        tx: Tx,
        run: RunRecord,
        calls: Sequence[CallRecord],
        assistant: Sequence[bytes],
        facts: DecideFacts | None,
    ) -> Tx:
        """Record the turn's calls and the assistant's items; hand the calls to the validator."""
        tx.step = "start_calls"
        self.create_calls(tx, calls)
        call_ids = [call.call_id for call in calls]
        self.append_history(tx, run.run_id, assistant)
        self.run_transition(
            tx, run.run_id, [RunState.AWAITING_MODEL], RunState.VALIDATING, expect_turn=run.turn
        )
        request = ValidateRequest(
            run_id=run.run_id, turn=run.turn, call_ids=tuple(call_ids), facts=facts
        )
        return self.outbox(tx, self.keys.run_stream("validate", run.run_id), request)

    def note_retry(self, run: RunRecord, attempt: int, reason: str, delay_s: float) -> Tx:
        """A model request of this turn failed and is asked again after ``delay_s``."""
        return self.event(
            Tx("note_retry"),
            run.run_id,
            "model.retry",
            turn=run.turn,
            attempt=attempt,
            reason=reason,
            delay_s=delay_s,
        )

    def advance_turn(self, tx: Tx, run: RunRecord, items: Sequence[bytes], *, reason: str) -> Tx:
        """Append ``items`` to the history and request the next turn, guarded on this turn."""
        tx.step = "advance_turn"
        if items:
            self.append_history(tx, run.run_id, items)
        self.run_transition(
            tx,
            run.run_id,
            [run.status],
            RunState.AWAITING_MODEL,
            expect_turn=run.turn,
            fields={"turn": run.turn + 1},
        )
        request = TurnRequest(run_id=run.run_id, turn=run.turn + 1, reason=reason)
        return self.outbox(tx, self.keys.run_stream("turns", run.run_id), request)

    def answer_rejected(self, tx: Tx, run: RunRecord, items: Sequence[bytes], why: str) -> Tx:
        """The final answer failed the run's acceptance rule: tell the model, take a turn."""
        self.advance_turn(tx, run, items, reason="fix_answer")
        tx.step = "answer_rejected"
        return self.event(tx, run.run_id, "answer.rejected", turn=run.turn, reason=why)

    def end_turn(self, tx: Tx, run: RunRecord, status: RunState, reason: str) -> Tx:
        """The turn's results end or pause the run (e.g. a write whose outcome is unknown)."""
        tx.step = "end_turn"
        return self.run_transition(
            tx, run.run_id, [run.status], status, expect_turn=run.turn, fields={"reason": reason}
        )

    def drop_deadline(self, run_id: str) -> Tx:
        """Take a run that is gone or over off the deadline sweep's index."""
        return Tx("drop_deadline").zrem(self.keys.deadlines(self.keys.partition(run_id)), run_id)

    async def end_run(self, run: RunRecord, status: RunState, reason: str) -> Tx:
        """Move a live run to ``status`` from the state it was read in (a dead letter, a
        deadline); a concurrent change makes the step a no-op.  Its calls still waiting for a
        person end ``cancelled`` and their approvals are withdrawn: nothing lists as pending
        an approval no run will ever use."""
        tx = self.run_transition(
            Tx("end_run"), run.run_id, run.status, status, fields={"reason": reason}
        )
        why = f"the run ended ({status.value}): {reason}"
        ended = {"reason": why, "result": error_result("cancelled", why)}
        for call in await self.turn_calls(run.run_id, run.turn):
            if call.state == CallState.NEEDS_APPROVAL and call.approval_id is not None:
                self.call_transition(
                    tx, run.run_id, call.call_id, [call.state], CallState.CANCELLED, fields=ended
                )
                self.withdraw_approval(tx, run.run_id, call.approval_id, None, why)
        return await self.retention(tx, run.run_id)
