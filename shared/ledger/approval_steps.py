"""The named steps of an approval: request it, apply a decision or an expiry, refuse one.

A decision is applied reserve-then-consume in one guarded step: the approval must still be
``pending`` and its call ``needs_approval``.  When the last pending approval of a batch is
decided, the held calls are released in the same step (``paused_approval → executing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from callgate.clock import now_ms
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import ApprovalRequested
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.reads import Reads
from callgate.ledger.run_index import approval_field
from callgate.ledger.tx import Tx
from callgate.records import BatchPolicy, CallRecord, Effect, error_result
from callgate.states import CallState, RunState

APPROVAL_STATE = {CallState.APPROVED: "approved", CallState.DENIED: "denied"}


@dataclass(frozen=True, slots=True)
class Decider:
    """Who decided, as verified: the person, the key that signed, the token, its id."""

    person: str
    signer: str
    token: str
    jti: str


class ApprovalSteps(Reads):
    """Approval steps; `Ledger` mixes them in."""

    def request_approval(self, tx: Tx, approval: ApprovalRecord, shown: dict[str, Any]) -> Tx:
        """The pending record bound to the exact arguments, its index entry, its event, and
        the notification a person (Slack, `callgate approvals`) acts on."""
        key = self.keys.approval(approval.run_id, approval.approval_id)
        tx.expect_missing(key).hset(key, approval.to_hash())
        index = self.keys.run_index(approval.run_id)  # so the run's end finds the record
        tx.vouch(index).hset(index, {approval_field(approval.approval_id): approval.call_id})
        self.inbox_add(
            tx,
            self.keys.pending_approvals,
            approval.run_id,
            approval.approval_id,
            approval.expires_ms,
        )
        notice = ApprovalRequested(
            run_id=approval.run_id,
            turn=approval.turn,
            call_id=approval.call_id,
            approval_id=approval.approval_id,
            tool=approval.tool,
            args_hash=approval.args_hash,
            arguments=shown,
            approver_role=approval.approver_role,
            requested_by=approval.requested_by,
            expires_ms=approval.expires_ms,
        )
        event = notice.model_dump(exclude={"v", "msg_id", "run_id", "turn", "kind"})
        self.event(tx, approval.run_id, "approval.requested", **event)
        return self.notify(tx, approval.run_id, notice)

    def apply_approval(
        self,
        record: ApprovalRecord,
        to: CallState,
        calls: Sequence[CallRecord],
        *,
        msg_id: str,
        decider: Decider | None,
        reason: str | None,
        policy: BatchPolicy = "hold_effects",
    ) -> Tx:
        """Decide ``record`` (approved, denied, or expired without a ``decider``) and, if it
        was the batch's last pending approval, release what the batch held (``policy``: the
        run's); guarded on every sibling still pending and on the decision never having been
        applied before."""
        tx = Tx("apply_decision")
        state = APPROVAL_STATE.get(to, "expired")
        self._consume(tx, record, state, decider, reason)
        person = None if decider is None else decider.person
        self.call_transition(
            tx,
            record.run_id,
            record.call_id,
            [CallState.NEEDS_APPROVAL],
            to,
            fields=_decision_fields(to, person, reason),
        )
        self.event(
            tx,
            record.run_id,
            f"approval.{state}",
            approval_id=record.approval_id,
            call_id=record.call_id,
            approver=person,
            reason=reason,
            msg_id=msg_id,
            signed_by=None if decider is None else decider.signer,
        )
        return self._release_if_last(tx, record, to, calls, policy)

    def _release_if_last(
        self,
        tx: Tx,
        record: ApprovalRecord,
        to: CallState,
        calls: Sequence[CallRecord],
        policy: BatchPolicy,
    ) -> Tx:
        """Where the decided call goes: while siblings are pending, only its own route
        (guarded on them still pending, so no decision applies as "not the last" once it is);
        as the batch's last decision, the run resumes and every held call goes with it
        (`held_writes`: only those, never one that went out already)."""
        this = next(c for c in calls if c.call_id == record.call_id)
        pending = [c for c in calls if c.state == CallState.NEEDS_APPROVAL and c is not this]
        for sibling in pending:
            tx.expect(
                self.keys.call(sibling.run_id, sibling.call_id), "state", CallState.NEEDS_APPROVAL
            )
        decided = as_decided(this, to)
        if pending:
            return dispatch(self, tx, record.run_id, record.turn, [decided], writes=False)
        held = [as_decided(c, c.state) for c in held_writes(calls, policy) if c is not this]
        self.run_transition(
            tx,
            record.run_id,
            [RunState.PAUSED_APPROVAL],
            RunState.EXECUTING,
            expect_turn=record.turn,
            fields={"reason": None},
        )
        return dispatch(self, tx, record.run_id, record.turn, [decided, *held])

    def _consume(
        self,
        tx: Tx,
        record: ApprovalRecord,
        state: str,
        decider: Decider | None,
        reason: str | None,
    ) -> None:
        key = self.keys.approval(record.run_id, record.approval_id)
        tx.expect(key, "state", "pending")
        fields: dict[str, str | int] = {
            "state": state,
            "decided_ms": now_ms(),
            "reason": reason or "",
        }
        if decider is not None:
            self.once(tx, record.run_id, decider.jti, record.approval_id)
            fields.update(
                decided_by=decider.person, signed_by=decider.signer, decision_token=decider.token
            )
        tx.hset(key, fields)
        self.inbox_remove(tx, self.keys.pending_approvals, record.run_id, record.approval_id)

    def withdraw_approval(
        self, tx: Tx, run_id: str, approval_id: str, person: str | None, why: str
    ) -> Tx:
        """A pending approval its run no longer waits for (cancelled, or ended): no longer
        decidable and out of the pending index; guarded on it still pending."""
        key = self.keys.approval(run_id, approval_id)
        fields: dict[str, str | int] = {"state": "withdrawn", "decided_ms": now_ms(), "reason": why}
        if person is not None:
            fields["decided_by"] = person
        tx.expect(key, "state", "pending").hset(key, fields)
        return self.inbox_remove(tx, self.keys.pending_approvals, run_id, approval_id)

    def forget_stale_pending(self, run_id: str, approval_id: str) -> Tx:
        """Drop an inbox entry whose approval no longer waits: its record expired with its run,
        or was decided by a step older than the index.  Unguarded, as both are for good (a
        record is made in the step that adds its entry, and decided states are final)."""
        tx = Tx("forget_stale_pending")
        return self.inbox_remove(tx, self.keys.pending_approvals, run_id, approval_id)

    def once(self, tx: Tx, run_id: str, jti: str, what: str) -> Tx:
        """Guard on a person's decision (by its token id) never applied before, and mark it."""
        seen = self.keys.decisions_seen(run_id)
        return tx.expect_field_missing(seen, jti).hset(seen, {jti: what})

    def refuse_decision(
        self, run_id: str, *, only_if_run_exists: bool, event: str = "approval.refused", **data: Any
    ) -> Tx:
        """Record a refused decision in the run's trace.  A forged decision naming no run
        must not leave an event stream behind that nothing would ever expire: the guard is on
        the run's event log itself (made with the run, expiring with it), so the step touches
        that one key and a login that may write only event logs (the HTTP API's) can take it."""
        tx = Tx("refuse_decision")
        if only_if_run_exists:
            tx.expect_exists(self.keys.events(run_id))
        return self.event(tx, run_id, event, **data)


def _decision_fields(to: CallState, approver: str | None, reason: str | None) -> dict[str, Any]:
    if to == CallState.APPROVED:
        return {"reason": f"approved by {approver}"}
    if to == CallState.DENIED:
        message = f"denied by approver {approver}: {reason or 'no reason given'}"
        return {"reason": message, "result": error_result("denied_by_approver", message)}
    message = "no approver decided before the approval expired"
    return {"reason": message, "result": error_result("approval_expired", message)}


def as_decided(call: CallRecord, state: CallState) -> Decided:
    """``call`` as `dispatch` sends it, in ``state``."""
    # An approved call runs whatever its effect; `is_write` only orders it into a chain.
    return Decided(
        call.call_id,
        call.index,
        state,
        is_write=call.effect != Effect.READ,
        resource_key=call.resource_key,
    )


def held_writes(calls: Sequence[CallRecord], policy: BatchPolicy) -> list[CallRecord]:
    """The calls of a batch held back while an approval is pending: approved writes, and
    (``hold_effects``) allowed writes.  Reads, approved or allowed, went out when decided, and
    under ``run_allowed`` allowed writes went out (or were chained) at once: sending any of
    those again would be a second exec order for one call."""
    return [
        c
        for c in calls
        if c.effect != Effect.READ
        and (
            c.state == CallState.APPROVED
            or (c.state == CallState.ALLOWED and policy == "hold_effects")
        )
    ]
