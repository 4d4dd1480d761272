"""The named steps of the loop: a run's (start it, record what the model said, end or
advance a turn) and a call's (decide a turn's calls, take one, settle it).  A write whose
outcome is unknown goes on with `callgate.ledger.reconcile_steps`.

Each builds one guarded `Tx` (see `callgate.ledger.base`); the services apply it, with their
message's ack, in one atomic step.  Steps that rely on a message's facts bind them
(`callgate.ledger.binding`) and return the `Binding`, so the caller can tell a stale or forged
message from a lost race.  A step that must know which keys a run made (to let them expire once
it ends) reads them first, so those steps are ``async``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import (
    CallResult,
    ExecRequest,
    ReconcileRequest,
    TurnRequest,
    ValidateRequest,
)
from callgate.facts import DecideFacts, ExecFacts
from callgate.ledger.approval_steps import ApprovalSteps
from callgate.ledger.base import CallRef
from callgate.ledger.binding import Binding, bind
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.tx import Tx
from callgate.providers.base import TurnRecord
from callgate.records import CallOutcome, CallRecord, RunRecord, error_result
from callgate.states import RUN_TERMINAL, CallState, RunState


@dataclass(frozen=True, slots=True)
class Verdict:
    """The validator's decision on one call, as the ledger records it."""

    call_id: str
    state: CallState
    fields: dict[str, Any]
    """What the call record gains: decision, arguments, hash, version, result, …"""
    route: Decided
    sensitive: frozenset[str] = frozenset()
    approval: ApprovalRecord | None = None
    """The approval a call that needs a human waits on."""
    shown: dict[str, Any] | None = None
    """Its arguments as the approver is shown them (sensitive fields redacted)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one execution ended: a terminal state with its result, or ``unknown``."""

    state: CallState
    result: CallOutcome | None
    reason: str | None = None


def items_json(items: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """Provider-native history items as the ledger stores them (one JSON each)."""
    return [orjson.dumps(item) for item in items]


class LoopSteps(ApprovalSteps):
    """The loop's run and call steps; `Ledger` mixes them in."""

    # ---- a run ---------------------------------------------------------------------------

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
        self, tx: Tx, run: RunRecord, record: TurnRecord, outcome: str, raw: bytes
    ) -> Tx:
        """The raw response of this turn (``raw``: the record as JSON, or only what is kept
        of one over the limits), its usage and its event (every end of a turn)."""
        keys = self.keys
        raw_key = keys.raw_responses(run.run_id)
        tx.vouch(raw_key).hset(raw_key, {str(run.turn): raw})
        tx.hincrby(keys.run(run.run_id), "usage_input_tokens", record.input_tokens)
        tx.hincrby(keys.run(run.run_id), "usage_output_tokens", record.output_tokens)
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
            await self.retention(tx, run.run_id, run.turn)
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
        for call in calls:
            self.create_call(tx, call)
        call_ids = [call.call_id for call in calls]
        turn_calls = self.keys.turn_calls(run.run_id, run.turn)
        tx.vouch(turn_calls).rpush(turn_calls, *call_ids)
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
        return await self.retention(tx, run.run_id, run.turn)

    # ---- a call ----------------------------------------------------------------------------

    def bind_decide(self, tx: Tx, run_id: str, facts: DecideFacts) -> Binding:
        """Guard on the ledger holding the run's authority and the calls as ``facts`` say."""
        binding = bind(tx, self.keys.run(run_id), facts.run)
        for call in facts.calls:
            bind(tx, self.keys.call(run_id, call.call_id), call, binding)
        return binding

    def check_decide(self, run_id: str, turn: int, facts: DecideFacts) -> tuple[Tx, Binding]:
        """A step that writes nothing: the facts hold and the turn still waits for them.
        Taken before anything with I/O (a tool's preconditions) runs for them."""
        tx = Tx("check_decide").expect(self.keys.run(run_id), "status", RunState.VALIDATING)
        tx.expect(self.keys.run(run_id), "turn", str(turn))
        for call in facts.calls:
            tx.expect(self.keys.call(run_id, call.call_id), "state", CallState.REQUESTED)
        return tx, self.bind_decide(tx, run_id, facts)

    def decide_calls(
        self, run_id: str, turn: int, facts: DecideFacts, verdicts: Sequence[Verdict]
    ) -> tuple[Tx, Binding]:
        """Record every verdict, pause for approvals or start executing, dispatch the calls."""
        tx = Tx("decide_calls")
        binding = self.bind_decide(tx, run_id, facts)
        approvals = [v for v in verdicts if v.approval is not None]
        for verdict in verdicts:
            if verdict.approval is not None:
                self.request_approval(tx, verdict.approval, verdict.shown or {})
            self.call_transition(
                tx,
                run_id,
                verdict.call_id,
                [CallState.REQUESTED],
                verdict.state,
                fields=verdict.fields,
                sensitive=verdict.sensitive,
            )
        to_state = RunState.PAUSED_APPROVAL if approvals else RunState.EXECUTING
        self.run_transition(
            tx,
            run_id,
            [RunState.VALIDATING],
            to_state,
            expect_turn=turn,
            fields={"reason": "awaiting approval"} if approvals else None,
        )
        hold = bool(approvals) and facts.run.batch_policy == "hold_effects"
        dispatch(self, tx, run_id, turn, [v.route for v in verdicts], writes=not hold)
        return tx, binding

    def bind_exec(self, tx: Tx, run_id: str, call_id: str, facts: ExecFacts) -> Binding:
        binding = bind(tx, self.keys.run(run_id), facts.run)
        return bind(tx, self.keys.call(run_id, call_id), facts.call, binding)

    def take_call(
        self,
        run_id: str,
        call_id: str,
        facts: ExecFacts,
        attempt: int,
        consumer: str,
        consume: str | None = None,
    ) -> tuple[Tx, Binding]:
        """``allowed|approved → executing`` (or re-take an orphan: attempt n → n+1), guarded
        on the facts the executor will run it on.  With ``consume`` (an approval id) the
        approval moves ``approved → consumed`` in the same step, so one approval sends one
        call once; a re-take finds it already ``consumed`` by this very call."""
        tx = Tx("take_call")
        if facts.state == CallState.EXECUTING:
            tx.expect(self.keys.call(run_id, call_id), "attempts", str(facts.attempts))
        binding = self.bind_exec(tx, run_id, call_id, facts)
        if consume is not None:
            key = self.keys.approval(run_id, consume)
            tx.expect(key, "call_id", call_id)
            if facts.state == CallState.EXECUTING:
                tx.expect(key, "state", "consumed")
            else:
                tx.expect(key, "state", "approved").hset(key, {"state": "consumed"})
                self.event(
                    tx,
                    run_id,
                    "approval.consumed",
                    approval_id=consume,
                    call_id=call_id,
                    attempt=attempt,
                )
        self.call_transition(
            tx,
            run_id,
            call_id,
            [facts.state],
            CallState.EXECUTING,
            fields=_taken(attempt, consumer),
        )
        return tx, binding

    def settle_call(
        self,
        call: CallRef,
        attempt: int,
        outcome: Outcome,
        chain: tuple[str, ...],
        sensitive: frozenset[str],
    ) -> Tx:
        """The execution's outcome, its message and the chain's next call, in one step."""
        tx = Tx("settle_call").expect(
            self.keys.call(call.run_id, call.call_id), "attempts", str(attempt)
        )
        fields: dict[str, Any] = {}
        if outcome.result is not None:
            fields["result"] = outcome.result
        if outcome.reason is not None:
            fields["reason"] = outcome.reason
        self.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.EXECUTING],
            outcome.state,
            fields=fields,
            sensitive=sensitive,
        )
        if outcome.state == CallState.UNKNOWN:
            return self._to_reconciler(tx, call, chain)
        return self.report(tx, call, outcome, chain, carry=not sensitive)

    def _to_reconciler(self, tx: Tx, call: CallRef, chain: tuple[str, ...]) -> Tx:
        request = ReconcileRequest(
            run_id=call.run_id, turn=call.turn, call_id=call.call_id, chain=chain
        )
        return self.outbox(tx, self.keys.run_stream("reconcile", call.run_id), request)

    def report(
        self, tx: Tx, call: CallRef, outcome: Outcome, chain: tuple[str, ...], *, carry: bool
    ) -> Tx:
        """The result message (carrying the result unless the tool marks a field sensitive or
        carrying is off: a result may echo a sensitive value, which stays in the ledger) and
        the chain's next call."""
        carried = outcome.result if carry and self.settings.carry else None
        self.outbox(
            tx,
            self.keys.run_stream("results", call.run_id),
            CallResult(
                run_id=call.run_id,
                turn=call.turn,
                call_id=call.call_id,
                state=outcome.state.value,
                result=carried,
            ),
        )
        if chain:
            request = ExecRequest(
                run_id=call.run_id, turn=call.turn, call_id=chain[0], chain=chain[1:]
            )
            self.outbox(tx, self.keys.run_stream("exec", call.run_id), request)
        return tx


def _taken(attempt: int, consumer: str) -> dict[str, Any]:
    return {"attempts": attempt, "executor": consumer}
