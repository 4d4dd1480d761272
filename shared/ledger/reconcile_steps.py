"""The steps of a write whose outcome is unknown (README: Approvals and unknown outcomes):
found orphaned (its executor died mid-write), claimed by one reconciler, settled by the
authoritative system's answer, or left ``unresolved`` for a person (who resolves it:
`callgate.ledger.resolve_steps`).  Nothing is ever replayed.

The loop's steps (`callgate.ledger.steps`) stop where an outcome is unknown: `settle_call` hands
such a write to the reconciler, and these steps take it from there.
"""

from __future__ import annotations

from typing import Any

from callgate.clock import now_ms
from callgate.envelopes import OutcomeUnknown
from callgate.ledger.base import CallRef
from callgate.ledger.call_steps import Outcome
from callgate.ledger.steps import LoopSteps
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState, RunState

UNRESOLVED_REASON = "outcome still unknown after every reconciliation check"


class ReconcileSteps(LoopSteps):
    """The reconciler's steps, and the orphaned write that starts them; `Ledger` mixes them in."""

    def orphaned_write(self, call: CallRef, attempts: int, chain: tuple[str, ...]) -> Tx:
        """A write found ``executing`` after its executor died: its outcome is unknown."""
        tx = Tx("orphaned_write").expect(
            self.keys.call(call.run_id, call.call_id), "attempts", str(attempts)
        )
        reason = "executor died while the write was in flight"
        self.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.EXECUTING],
            CallState.UNKNOWN,
            fields={"reason": reason},
        )
        return self._to_reconciler(tx, call, chain)

    def claim_reconcile(self, call: CallRecord) -> Tx:
        """``unknown → reconciling``: one reconciler asks the authoritative system."""
        return self.call_transition(
            Tx("claim_reconcile"),
            call.run_id,
            call.call_id,
            [CallState.UNKNOWN],
            CallState.RECONCILING,
        )

    def settle_reconcile(
        self, call: CallRecord, outcome: Outcome, chain: tuple[str, ...], sensitive: frozenset[str]
    ) -> Tx:
        """The authoritative system answered: the confirmed result, or "not applied"."""
        fields: dict[str, Any] = {"result": outcome.result, "reason": outcome.reason}
        tx = self.call_transition(
            Tx("settle_reconcile"),
            call.run_id,
            call.call_id,
            [CallState.RECONCILING],
            outcome.state,
            fields=fields,
            sensitive=sensitive,
        )
        return self.report(tx, call, Outcome(outcome.state, None), chain, carry=False)

    def unresolved(self, run: RunRecord, call: CallRecord, *, pause: bool) -> Tx:
        """Still unknown after every check: the call waits for a person; with ``pause`` the run
        pauses too and a person is notified.  Nothing is replayed."""
        tx = self.call_transition(
            Tx("unresolved"),
            call.run_id,
            call.call_id,
            [CallState.RECONCILING],
            CallState.UNRESOLVED,
            fields={"reason": UNRESOLVED_REASON},
        )
        self.inbox_add(tx, self.keys.unresolved_calls, call.run_id, call.call_id, now_ms())
        if not pause:
            return tx
        operation = f"operation {call.operation_id}"
        detail = f"write outcome unknown: {call.tool} ({call.call_id}, {operation})"
        self.run_transition(
            tx,
            run.run_id,
            [RunState.EXECUTING, RunState.PAUSED_APPROVAL],
            RunState.PAUSED_UNKNOWN_OUTCOME,
            expect_turn=call.turn,
            fields={"reason": detail},
        )
        notice = OutcomeUnknown(
            run_id=run.run_id,
            turn=call.turn,
            call_id=call.call_id,
            tool=call.tool,
            operation_id=call.operation_id,
            detail=detail,
        )
        return self.notify(tx, run.run_id, notice)
