"""The named steps of a call: decide a turn's calls, take one, settle it (a write whose
outcome is unknown goes on with `callgate.ledger.reconcile_steps`).  Each builds one guarded
`Tx`; the steps that rely on a message's facts bind them (`callgate.ledger.binding`) and return
the `Binding`, so the caller can tell a stale or forged message from a lost race.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import CallResult, ExecRequest, ReconcileRequest
from callgate.facts import DecideFacts, ExecFacts
from callgate.ledger.approval_steps import ApprovalSteps
from callgate.ledger.base import CallRef
from callgate.ledger.binding import Binding, bind
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.tx import Tx
from callgate.records import CallOutcome, error_result
from callgate.states import CallState, RunState


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


class CallSteps(ApprovalSteps):
    """The loop's call steps; `LoopSteps` adds the run's."""

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

    def untake_call(
        self,
        run_id: str,
        call_id: str,
        facts: ExecFacts,
        attempt: int,
        consumer: str,
        run_status: RunState,
    ) -> Tx:
        """Take back this executor's take of a write it did not send, because no replica
        confirmed its ``executing`` intent (`callgate.ledger.durable`): the call returns to
        the state it was taken from, and the approval the take consumed is usable again; or,
        if the run was cancelled meanwhile (a cancel leaves a call in flight to settle truly),
        the call ends ``failed``: not applied.  That is the truth — nothing went out — where
        leaving it ``executing`` would make it an orphan for the reconciler, and a write "not
        applied" fails.  Guarded on this very take (its attempt and executor) and on the run's
        status as read (``run_status``), so a call anyone else moved on stays as it is."""
        key = self.keys.call(run_id, call_id)
        tx = Tx("untake_call").expect(key, "attempts", str(attempt))
        tx.expect(key, "executor", consumer)
        tx.expect(self.keys.run(run_id), "status", run_status)
        reason = "not sent: no replica confirmed its executing intent"
        if run_status == RunState.CANCELLED:
            ended = {"reason": reason, "result": error_result("not_sent", reason)}
            self.call_transition(
                tx, run_id, call_id, [CallState.EXECUTING], CallState.FAILED, fields=ended
            )
        else:
            approval_id = facts.call.approval_id
            if approval_id is not None:
                approval = self.keys.approval(run_id, approval_id)
                tx.expect(approval, "call_id", call_id).expect(approval, "state", "consumed")
                tx.hset(approval, {"state": "approved"})
            self.call_transition(tx, run_id, call_id, [CallState.EXECUTING], facts.state)
        return self.event(
            tx, run_id, "call.unsent", call_id=call_id, attempt=attempt, reason=reason
        )

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
