"""The named steps of a call: decide a turn's calls, take one, settle it, reconcile it.

Each builds one guarded `Tx`; the services apply it (with their message's ack) in one atomic
step.  Steps that rely on a message's facts bind them (`callgate.facts.bind`) and return the
`Binding`, so the caller can tell a stale or forged message from a lost race.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from callgate.approvals.record import ApprovalRecord
from callgate.envelopes import CallResult, ExecRequest, OutcomeUnknown, ReconcileRequest
from callgate.facts import DecideFacts, ExecFacts
from callgate.ledger.approval_steps import ApprovalSteps
from callgate.ledger.base import CallRef
from callgate.ledger.binding import Binding, bind
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.tx import Tx
from callgate.records import CallOutcome, CallRecord, RunRecord
from callgate.states import CallState, RunState

UNRESOLVED_REASON = "outcome still unknown after every reconciliation check"


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
    """Call-level steps; `Ledger` mixes them in."""

    def bind_decide(self, tx: Tx, run_id: str, facts: DecideFacts) -> Binding:
        """Guard on the ledger holding the run's authority and the calls as ``facts`` say."""
        binding = bind(tx, self.keys.run(run_id), facts.run)
        for call in facts.calls:
            bind(tx, self.keys.call(run_id, call.call_id), call, binding)
        return binding

    def check_decide(self, run_id: str, turn: int, facts: DecideFacts) -> tuple[Tx, Binding]:
        """A step that writes nothing: the facts hold and the turn still waits for them.
        Taken before anything with I/O (a tool's preconditions) runs for them."""
        tx = Tx().expect(self.keys.run(run_id), "status", RunState.VALIDATING)
        tx.expect(self.keys.run(run_id), "turn", str(turn))
        for call in facts.calls:
            tx.expect(self.keys.call(run_id, call.call_id), "state", CallState.REQUESTED)
        return tx, self.bind_decide(tx, run_id, facts)

    def decide_calls(
        self, run_id: str, turn: int, facts: DecideFacts, verdicts: Sequence[Verdict]
    ) -> tuple[Tx, Binding]:
        """Record every verdict, pause for approvals or start executing, dispatch the calls."""
        tx = Tx()
        binding = self.bind_decide(tx, run_id, facts)
        approvals = [v for v in verdicts if v.approval is not None]
        for verdict in verdicts:
            if verdict.approval is not None:
                self.request_approval(tx, verdict.approval, verdict.shown or {})
            self.call_transition(tx, run_id, verdict.call_id, [CallState.REQUESTED],
                                 verdict.state, fields=verdict.fields,
                                 sensitive=verdict.sensitive)
        to_state = RunState.PAUSED_APPROVAL if approvals else RunState.EXECUTING
        self.run_transition(tx, run_id, [RunState.VALIDATING], to_state, expect_turn=turn,
                            fields={"reason": "awaiting approval"} if approvals else None)
        hold = bool(approvals) and facts.run.batch_policy == "hold_effects"
        dispatch(self, tx, run_id, turn, [v.route for v in verdicts], writes=not hold)
        return tx, binding

    def bind_exec(self, tx: Tx, run_id: str, call_id: str, facts: ExecFacts) -> Binding:
        binding = bind(tx, self.keys.run(run_id), facts.run)
        return bind(tx, self.keys.call(run_id, call_id), facts.call, binding)

    def take_call(
        self, run_id: str, call_id: str, facts: ExecFacts, attempt: int, consumer: str
    ) -> tuple[Tx, Binding]:
        """``allowed|approved → executing`` (or re-take an orphan: attempt n → n+1), guarded
        on the facts the executor will run it on."""
        tx = Tx()
        if facts.state == CallState.EXECUTING:
            tx.expect(self.keys.call(run_id, call_id), "attempts", str(facts.attempts))
        binding = self.bind_exec(tx, run_id, call_id, facts)
        self.call_transition(tx, run_id, call_id, [facts.state], CallState.EXECUTING,
                             fields=_taken(attempt, consumer))
        return tx, binding

    def read_through(
        self, call: CallRef, facts: ExecFacts, attempt: int, consumer: str, outcome: Outcome,
        chain: tuple[str, ...], sensitive: frozenset[str],
    ) -> tuple[Tx, Binding]:
        """A read taken and settled in one step: redoing a read is harmless, so a separate
        durable take would only cost a round trip on every tool call."""
        tx = Tx()
        binding = self.bind_exec(tx, call.run_id, call.call_id, facts)
        fields = {} if outcome.result is None else {"result": outcome.result}
        self.call_run_through(tx, call.run_id, call.call_id, facts.state, outcome.state,
                              attempts=facts.attempts, taken=_taken(attempt, consumer),
                              fields=fields, sensitive=sensitive)
        self.report(tx, call, outcome, chain, carry=not sensitive)
        return tx, binding

    def settle_call(
        self, call: CallRef, attempt: int, outcome: Outcome, chain: tuple[str, ...],
        sensitive: frozenset[str],
    ) -> Tx:
        """The execution's outcome, its message and the chain's next call, in one step."""
        tx = Tx().expect(self.keys.call(call.run_id, call.call_id), "attempts", str(attempt))
        fields: dict[str, Any] = {}
        if outcome.result is not None:
            fields["result"] = outcome.result
        if outcome.reason is not None:
            fields["reason"] = outcome.reason
        self.call_transition(tx, call.run_id, call.call_id, [CallState.EXECUTING],
                             outcome.state, fields=fields, sensitive=sensitive)
        if outcome.state == CallState.UNKNOWN:
            return self._to_reconciler(tx, call, chain)
        return self.report(tx, call, outcome, chain, carry=not sensitive)

    def orphaned_write(self, call: CallRef, attempts: int, chain: tuple[str, ...]) -> Tx:
        """A write found ``executing`` after its executor died: its outcome is unknown."""
        tx = Tx().expect(self.keys.call(call.run_id, call.call_id), "attempts", str(attempts))
        reason = "executor died while the write was in flight"
        self.call_transition(tx, call.run_id, call.call_id, [CallState.EXECUTING],
                             CallState.UNKNOWN, fields={"reason": reason})
        return self._to_reconciler(tx, call, chain)

    def _to_reconciler(self, tx: Tx, call: CallRef, chain: tuple[str, ...]) -> Tx:
        request = ReconcileRequest(run_id=call.run_id, turn=call.turn, call_id=call.call_id,
                                   chain=chain)
        return self.outbox(tx, self.keys.run_stream("reconcile", call.run_id), request)

    def report(
        self, tx: Tx, call: CallRef, outcome: Outcome, chain: tuple[str, ...], *, carry: bool
    ) -> Tx:
        """The result message (carrying the result unless the tool marks a field sensitive or
        carrying is off: a result may echo a sensitive value, which stays in the ledger) and
        the chain's next call."""
        carried = outcome.result if carry and self.settings.carry else None
        self.outbox(tx, self.keys.run_stream("results", call.run_id),
                    CallResult(run_id=call.run_id, turn=call.turn, call_id=call.call_id,
                               state=outcome.state.value, result=carried))
        if chain:
            request = ExecRequest(run_id=call.run_id, turn=call.turn, call_id=chain[0],
                                  chain=chain[1:])
            self.outbox(tx, self.keys.run_stream("exec", call.run_id), request)
        return tx

    # ---- reconciliation ------------------------------------------------------------------
    def claim_reconcile(self, call: CallRecord) -> Tx:
        """``unknown → reconciling``: one reconciler asks the authoritative system."""
        return self.call_transition(Tx(), call.run_id, call.call_id, [CallState.UNKNOWN],
                                    CallState.RECONCILING)

    def settle_reconcile(
        self, call: CallRecord, outcome: Outcome, chain: tuple[str, ...], sensitive: frozenset[str]
    ) -> Tx:
        """The authoritative system answered: the confirmed result, or "not applied"."""
        fields: dict[str, Any] = {"result": outcome.result, "reason": outcome.reason}
        tx = self.call_transition(Tx(), call.run_id, call.call_id, [CallState.RECONCILING],
                                  outcome.state, fields=fields, sensitive=sensitive)
        return self.report(tx, call, Outcome(outcome.state, None), chain, carry=False)

    def unresolved(self, run: RunRecord, call: CallRecord, *, pause: bool) -> Tx:
        """Still unknown after every check: the call waits for a person; with ``pause`` the run
        pauses too and a person is notified.  Nothing is replayed."""
        tx = self.call_transition(Tx(), call.run_id, call.call_id, [CallState.RECONCILING],
                                  CallState.UNRESOLVED, fields={"reason": UNRESOLVED_REASON})
        if not pause:
            return tx
        operation = f"operation {call.operation_id}"
        detail = f"write outcome unknown: {call.tool} ({call.call_id}, {operation})"
        self.run_transition(tx, run.run_id, [RunState.EXECUTING, RunState.PAUSED_APPROVAL],
                            RunState.PAUSED_UNKNOWN_OUTCOME, expect_turn=call.turn,
                            fields={"reason": detail})
        notice = OutcomeUnknown(run_id=run.run_id, turn=call.turn, call_id=call.call_id,
                                tool=call.tool, operation_id=call.operation_id, detail=detail)
        return self.outbox(tx, self.keys.run_stream("notify", run.run_id), notice)


def _taken(attempt: int, consumer: str) -> dict[str, Any]:
    return {"attempts": attempt, "executor": consumer}

