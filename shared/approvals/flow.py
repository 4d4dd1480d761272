"""How a human's decision (or an expiry) on a pending approval is applied, inside the validator.

Reserve-then-consume in one guarded step: the approval must still be ``pending`` and its call
``needs_approval``.  When the last pending approval of a batch is decided, the held calls are
released in the same step (the run moves from ``paused_approval`` to ``executing``).  Two
decisions on one batch racing on two replicas serialize on each other's call state: the
loser re-reads and retries, so the batch is released exactly once.
"""

from __future__ import annotations

import logging
from typing import Literal

from callgate.approvals.record import ApprovalRecord, refusal
from callgate.crashpoints import crash_point
from callgate.envelopes import ApprovalDecision, ApprovalExpired
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.store import now_ms
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, error_result
from callgate.states import CallState, RunState
from callgate.streams.service import Runtime

log = logging.getLogger("callgate.approvals")

MAX_RACE_RETRIES = 8
Result = Literal["done", "retry"]


class ApprovalFlow:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger

    async def on_message(self, message: ApprovalDecision | ApprovalExpired) -> None:
        for _ in range(MAX_RACE_RETRIES):
            if await self._try(message) == "done":
                return
        log.warning(
            "approval race retries exhausted",
            extra={"fields": {"run_id": message.run_id, "approval_id": message.approval_id}},
        )
        raise RuntimeError("approval decision kept losing races; will be redelivered")

    async def _try(self, message: ApprovalDecision | ApprovalExpired) -> Result:
        record = await self.ledger.get_approval(message.run_id, message.approval_id)
        now = now_ms()
        if isinstance(message, ApprovalDecision):
            roles = self.rt.settings.approvers.get(message.approver, [])
            reason = refusal(record, message, roles, now)
            if reason is not None:
                await self._refuse(message, reason)
                return "done"
            assert record is not None
            to = CallState.APPROVED if message.decision == "approve" else CallState.DENIED
            return await self._apply(record, to, message, message.approver, message.reason)
        if record is None or record.state != "pending" or now < record.expires_ms:
            return "done"
        return await self._apply(record, CallState.EXPIRED, message, None, "approval expired")

    async def _apply(
        self,
        record: ApprovalRecord,
        to: CallState,
        message: ApprovalDecision | ApprovalExpired,
        approver: str | None,
        reason: str | None,
    ) -> Result:
        keys = self.rt.keys
        run = await self.ledger.get_run(record.run_id)
        if run is None:
            return "done"
        calls = await self.ledger.get_calls(
            record.run_id, await self.ledger.turn_call_ids(record.run_id, record.turn)
        )
        tx = Tx()
        approval_key = keys.approval(record.run_id, record.approval_id)
        state = {CallState.APPROVED: "approved", CallState.DENIED: "denied"}.get(to, "expired")
        tx.expect(approval_key, "state", "pending")
        tx.hset(
            approval_key,
            {
                "state": state,
                "decided_by": approver or "",
                "decided_ms": now_ms(),
                "reason": reason or "",
            },
        )
        tx.zrem(keys.run_pending_approvals(record.run_id), f"{record.run_id} {record.approval_id}")
        self.ledger.call_transition(
            tx,
            record.run_id,
            record.call_id,
            [CallState.NEEDS_APPROVAL],
            to,
            fields=_decision_fields(to, approver, reason),
        )
        self.ledger.event(
            tx,
            record.run_id,
            f"approval.{state}",
            approval_id=record.approval_id,
            call_id=record.call_id,
            approver=approver,
            reason=reason,
            msg_id=message.msg_id,
        )
        this = next(c for c in calls if c.call_id == record.call_id)
        pending = [c for c in calls if c.state == CallState.NEEDS_APPROVAL and c is not this]
        for sibling in pending:
            tx.expect(keys.call(sibling.run_id, sibling.call_id), "state", CallState.NEEDS_APPROVAL)
        decided_this = _as_decided(this, to)
        if pending:
            dispatch(self.ledger, tx, record.run_id, record.turn, [decided_this], writes=False)
        else:
            self._release(tx, record, calls, decided_this)
        crash_point("validator.mid_approval")
        result = await self.ledger.apply(tx)
        if result.ok or result.failed is None:
            return "done"
        if result.failed.key == approval_key:
            await self._refuse_late(record, message, approver)
            return "done"
        return "retry" if result.failed.key != keys.run(record.run_id) else "done"

    def _release(
        self, tx: Tx, record: ApprovalRecord, calls: list[CallRecord], this: Decided
    ) -> None:
        """The batch is fully decided: run what was approved and the held writes."""
        held = [
            _as_decided(c, c.state)
            for c in calls
            if c.call_id != this.call_id
            and (
                c.state == CallState.APPROVED
                or (c.state == CallState.ALLOWED and c.effect != "read")
            )
        ]
        self.ledger.run_transition(
            tx,
            record.run_id,
            [RunState.PAUSED_APPROVAL],
            RunState.EXECUTING,
            expect_turn=record.turn,
            fields={"reason": None},
        )
        dispatch(self.ledger, tx, record.run_id, record.turn, [this, *held])

    async def _refuse(self, message: ApprovalDecision, reason: str) -> None:
        log.warning(
            "approval decision refused",
            extra={
                "fields": {
                    "run_id": message.run_id,
                    "approval_id": message.approval_id,
                    "approver": message.approver,
                    "reason": reason,
                }
            },
        )
        # Only into the log of a run that exists: a forged decision naming none must not leave
        # an event stream behind that nothing would ever expire.
        tx = Tx().expect(self.rt.keys.run(message.run_id), "status", *RunState)
        self.ledger.event(
            tx,
            message.run_id,
            "approval.refused",
            approval_id=message.approval_id,
            call_id=message.call_id,
            approver=message.approver,
            decision=message.decision,
            reason=reason,
            msg_id=message.msg_id,
        )
        await self.ledger.apply(tx)

    async def _refuse_late(
        self,
        record: ApprovalRecord,
        message: ApprovalDecision | ApprovalExpired,
        approver: str | None,
    ) -> None:
        tx = self.ledger.event(
            Tx(),
            record.run_id,
            "approval.refused",
            approval_id=record.approval_id,
            call_id=record.call_id,
            approver=approver,
            reason="already decided",
            msg_id=message.msg_id,
        )
        await self.ledger.apply(tx)


def _decision_fields(to: CallState, approver: str | None, reason: str | None) -> dict[str, object]:
    if to == CallState.APPROVED:
        return {"reason": f"approved by {approver}"}
    if to == CallState.DENIED:
        message = f"denied by approver {approver}: {reason or 'no reason given'}"
        return {"reason": message, "result": error_result("denied_by_approver", message)}
    message = "no approver decided before the approval expired"
    return {"reason": message, "result": error_result("approval_expired", message)}


def _as_decided(call: CallRecord, state: CallState) -> Decided:
    # An approved call runs whatever its effect; `is_write` only orders it into a chain.
    return Decided(
        call.call_id,
        call.index,
        state,
        is_write=call.effect != "read",
        resource_key=call.resource_key,
    )
