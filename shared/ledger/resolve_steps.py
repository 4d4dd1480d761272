"""A person resolves a write whose outcome stayed unknown (README: Approvals and unknown
outcomes): applied (with its result), not applied, or "ask the authoritative system again".
Nothing is ever replayed.

Each is one guarded step: the call is still ``unresolved``, its operation id is the one the
person was shown, and the signed decision (by its token id) was never applied before.  Applied
and not applied report the call's result to model_turn, which continues the run once every call
of the turn is terminal, and start the writes chained behind this one on the same resource; a
recheck hands the call back to the reconciler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from callgate.envelopes import ReconcileRequest
from callgate.ledger.approval_steps import Decider
from callgate.ledger.call_steps import Outcome
from callgate.ledger.dispatch import RUNNABLE
from callgate.ledger.reconcile_steps import ReconcileSteps
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, Effect, error_result, ok_result
from callgate.states import CallState

NOT_APPLIED_BY = "the write was not applied, confirmed by {person}; a retry needs a new decision"


class ResolveSteps(ReconcileSteps):
    """Steps a person's resolution takes; `Ledger` mixes them in."""

    def _resolving(self, call: CallRecord, decider: Decider) -> Tx:
        """The guards every resolution shares; the call leaves the inbox."""
        tx = Tx("resolve_call").expect(
            self.keys.call(call.run_id, call.call_id), "operation_id", call.operation_id or ""
        )
        self.inbox_remove(tx, self.keys.unresolved_calls, call.run_id, call.call_id)
        return self.once(tx, call.run_id, decider.jti, call.call_id)

    def resolve_call(
        self,
        call: CallRecord,
        turn_calls: Sequence[CallRecord],
        *,
        applied: bool,
        result: dict[str, Any] | None,
        decider: Decider,
        msg_id: str,
    ) -> Tx:
        """``unresolved → succeeded`` with ``result`` (applied) or ``→ failed`` (not applied),
        reported to the model like any outcome."""
        tx = self._resolving(call, decider)
        person = decider.person
        if applied:
            outcome = Outcome(
                CallState.SUCCEEDED, ok_result(result or {}), f"applied, confirmed by {person}"
            )
        else:
            message = NOT_APPLIED_BY.format(person=person)
            outcome = Outcome(
                CallState.FAILED,
                error_result("not_applied", message),
                f"not applied, confirmed by {person}",
            )
        self.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.UNRESOLVED],
            outcome.state,
            fields={"result": outcome.result, "reason": outcome.reason},
        )
        self.event(
            tx,
            call.run_id,
            "call.resolved",
            call_id=call.call_id,
            outcome="applied" if applied else "not_applied",
            person=person,
            signed_by=decider.signer,
            msg_id=msg_id,
        )
        return self.report(
            tx, call, Outcome(outcome.state, None), chained(call, turn_calls), carry=False
        )

    def recheck_call(
        self, call: CallRecord, turn_calls: Sequence[CallRecord], *, decider: Decider, msg_id: str
    ) -> Tx:
        """``unresolved → reconciling``: another round of the reconciler's checks."""
        tx = self._resolving(call, decider)
        self.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.UNRESOLVED],
            CallState.RECONCILING,
            fields={"reason": f"recheck asked by {decider.person}"},
        )
        self.event(
            tx,
            call.run_id,
            "call.resolved",
            call_id=call.call_id,
            outcome="recheck",
            person=decider.person,
            signed_by=decider.signer,
            msg_id=msg_id,
        )
        request = ReconcileRequest(
            run_id=call.run_id,
            turn=call.turn,
            call_id=call.call_id,
            chain=chained(call, turn_calls),
        )
        return self.outbox(tx, self.keys.run_stream("reconcile", call.run_id), request)


def chained(call: CallRecord, turn_calls: Sequence[CallRecord]) -> tuple[str, ...]:
    """The writes waiting behind ``call`` on its resource, in provider order (as dispatched:
    `callgate.ledger.dispatch`), which the message that settled it would have started."""
    waiting = [
        c
        for c in turn_calls
        if c.state in RUNNABLE
        and c.index > call.index
        and c.resource_key == call.resource_key
        and c.effect in (Effect.WRITE, Effect.IDEMPOTENT_WRITE)
    ]
    return tuple(c.call_id for c in sorted(waiting, key=lambda c: c.index))
