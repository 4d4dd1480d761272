"""How a human's decision (or an expiry) on a pending approval is applied, inside the validator.

The rule (`callgate.approvals.record.refusal`) says whether a decision may apply; the step
(`Ledger.apply_approval`) applies it reserve-then-consume, guarded on the approval still
``pending`` and its call ``needs_approval``.  Two decisions on one batch racing on two
replicas serialize on each other's call state: the loser re-reads and retries, so the batch
is released exactly once.
"""

from __future__ import annotations

import logging
from typing import Literal

from callgate.approvals.record import ApprovalRecord, refusal
from callgate.clock import now_ms
from callgate.crashpoints import crash_point
from callgate.envelopes import ApprovalDecision, ApprovalExpired
from callgate.logs import log_fields
from callgate.states import CallState
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
        log.warning("approval race retries exhausted",
                    extra=log_fields(run_id=message.run_id, approval_id=message.approval_id))
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
        run = await self.ledger.get_run(record.run_id)
        if run is None:
            return "done"
        calls = await self.ledger.turn_calls(record.run_id, record.turn)
        tx = self.ledger.apply_approval(record, to, calls, msg_id=message.msg_id,
                                        approver=approver, reason=reason)
        crash_point("validator.mid_approval")
        result = await self.ledger.apply(tx)
        if result.ok or result.failed is None:
            return "done"
        keys = self.rt.keys
        if result.failed.key == keys.approval(record.run_id, record.approval_id):
            await self._refuse_late(record, message, approver)
            return "done"
        return "retry" if result.failed.key != keys.run(record.run_id) else "done"

    async def _refuse(self, message: ApprovalDecision, reason: str) -> None:
        log.warning("approval decision refused", extra=log_fields(
            run_id=message.run_id, approval_id=message.approval_id,
            approver=message.approver, reason=reason))
        tx = self.ledger.refuse_decision(
            message.run_id, only_if_run_exists=True, approval_id=message.approval_id,
            call_id=message.call_id, approver=message.approver, decision=message.decision,
            reason=reason, msg_id=message.msg_id,
        )
        await self.ledger.apply(tx)

    async def _refuse_late(
        self,
        record: ApprovalRecord,
        message: ApprovalDecision | ApprovalExpired,
        approver: str | None,
    ) -> None:
        tx = self.ledger.refuse_decision(
            record.run_id, only_if_run_exists=False, approval_id=record.approval_id,
            call_id=record.call_id, approver=approver, reason="already decided",
            msg_id=message.msg_id,
        )
        await self.ledger.apply(tx)
