"""A person cancels a run, or resumes one that paused incomplete or was handed off at its
budget; a completed run takes a follow-up input (DESIGN §10).  Each is one guarded step on the
run as it was read, applied once per signed decision (or reply id).

Cancel: no model turn starts after it; calls not yet started end ``cancelled`` (with that
result), their pending approvals are withdrawn; a call in flight is never assumed cancelled —
it settles with its true outcome (a write through reconciliation), which the run keeps.
Resume: the run asks the model again — after a truncated turn, the next turn (the truncated
response stays in the record, never executed); after a hand-off at a turn's start, that turn —
under the new budget, with the usage so far kept; a handed-off run's keys stop expiring.
"""

from __future__ import annotations

from collections.abc import Sequence

from callgate.envelopes import TurnRequest
from callgate.ledger.approval_steps import Decider
from callgate.ledger.resolve_steps import ResolveSteps
from callgate.ledger.tx import Tx
from callgate.records import CallRecord, RunRecord, error_result
from callgate.states import CallState, RunState

NOT_STARTED = frozenset(
    {CallState.REQUESTED, CallState.NEEDS_APPROVAL, CallState.ALLOWED, CallState.APPROVED}
)
RESUMABLE = frozenset({RunState.PAUSED_INCOMPLETE, RunState.HANDED_OFF})


class ControlSteps(ResolveSteps):
    """Cancel and resume; `Ledger` mixes them in."""

    async def cancel_run(
        self,
        run: RunRecord,
        calls: Sequence[CallRecord],
        decider: Decider,
        *,
        reason: str | None,
        msg_id: str,
    ) -> Tx:
        """``run`` (as read) → ``cancelled``, with ``calls`` (its current turn's) not started."""
        tx = self.once(Tx("cancel_run"), run.run_id, decider.jti, "cancel")
        why = f"cancelled by {decider.person}" + (f": {reason}" if reason else "")
        for call in calls:
            if call.state not in NOT_STARTED:
                continue
            self.call_transition(
                tx,
                run.run_id,
                call.call_id,
                [call.state],
                CallState.CANCELLED,
                fields={"reason": why, "result": error_result("cancelled", why)},
            )
            if call.state == CallState.NEEDS_APPROVAL and call.approval_id is not None:
                self.withdraw_approval(
                    tx, run.run_id, call.approval_id, decider.person, "the run was cancelled"
                )
        self.run_transition(
            tx,
            run.run_id,
            [run.status],
            RunState.CANCELLED,
            expect_turn=run.turn,
            fields={"reason": why},
        )
        self.event(
            tx,
            run.run_id,
            "run.cancelled",
            person=decider.person,
            signed_by=decider.signer,
            reason=reason,
            msg_id=msg_id,
        )
        return await self.retention(tx, run.run_id)

    async def resume_run(
        self,
        run: RunRecord,
        decider: Decider,
        *,
        turn: int,
        max_turns: int,
        deadline_ms: int | None,
        max_total_tokens: int | None,
        msg_id: str,
    ) -> Tx:
        """``run`` (as read, paused incomplete or handed off) → asking the model for ``turn``
        under the new budget."""
        tx = self.once(Tx("resume_run"), run.run_id, decider.jti, "resume")
        fields = {
            "turn": turn,
            "max_turns": max_turns,
            "deadline_ms": deadline_ms,
            "max_total_tokens": max_total_tokens,
            "reason": f"resumed by {decider.person}",
        }
        self.run_transition(
            tx,
            run.run_id,
            [run.status],
            RunState.AWAITING_MODEL,
            expect_turn=run.turn,
            fields=fields,
        )
        if run.status == RunState.HANDED_OFF:
            await self._keep(tx, run)
        if deadline_ms is not None:
            tx.zadd(self.keys.deadlines(self.keys.partition(run.run_id)), {run.run_id: deadline_ms})
        self.event(
            tx,
            run.run_id,
            "run.resumed",
            person=decider.person,
            signed_by=decider.signer,
            turn=turn,
            max_turns=max_turns,
            msg_id=msg_id,
        )
        request = TurnRequest(run_id=run.run_id, turn=turn, reason="resume")
        return self.outbox(tx, self.keys.run_stream("turns", run.run_id), request)

    async def _keep(self, tx: Tx, run: RunRecord) -> None:
        """Stop the expiry an ended run's keys were given: it lives on; and have the webhooks
        worker follow it again (it stops following a run some time after it ended), so its
        next end is announced too.  Once per person's or service's action, never per call."""
        watch = self.keys.webhooks(self.keys.partition(run.run_id), "watch")
        tx.zadd(watch, {run.run_id: 0}, nx=True)
        index = await self.run_index(run.run_id)
        for key in self.run_keys(run.run_id, index.call_ids(), index.approval_ids):
            tx.persist(key)

    async def continue_run(
        self,
        run: RunRecord,
        user_items: Sequence[bytes],
        *,
        reply_id: str,
        sender: str,
        max_turns: int,
    ) -> Tx:
        """A completed ``run`` (as read) takes a follow-up input as its next turn, in the
        provider's own history; guarded on the reply never admitted before."""
        reply_key = f"reply:{reply_id}"  # conversation.reply_key
        tx = self.once(Tx("reply_run"), run.run_id, reply_key, "reply")
        self.run_transition(
            tx,
            run.run_id,
            [RunState.COMPLETED],
            RunState.AWAITING_MODEL,
            expect_turn=run.turn,
            fields={
                "turn": run.turn + 1,
                "max_turns": max_turns,
                "final_text": None,
                "reason": f"follow-up from {sender}",
            },
        )
        self.append_history(tx, run.run_id, user_items)
        await self._keep(tx, run)
        self.event(
            tx,
            run.run_id,
            "run.reply",
            reply_id=reply_id,
            sender=sender,
            turn=run.turn + 1,
            input_items=len(user_items),
        )
        request = TurnRequest(run_id=run.run_id, turn=run.turn + 1, reason="reply")
        return self.outbox(tx, self.keys.run_stream("turns", run.run_id), request)
