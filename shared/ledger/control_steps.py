"""A person cancels a run, or resumes one that paused incomplete or was handed off at its
budget; a completed run takes a follow-up input (DESIGN §10).  Each is one guarded step on the
run as it was read, applied once per signed decision (or reply id).

Cancel: no model turn starts after it; calls not yet started end ``cancelled`` (with that
result), their pending approvals are withdrawn; a call in flight is never assumed cancelled —
it settles with its true outcome (a write through reconciliation), which the run keeps.
Resume: the run asks the model again — after a truncated turn, the next turn (the truncated
response stays in the record, never executed); after a hand-off at a turn's start, that turn —
under the new budget, with the usage so far kept; a handed-off run's keys stop expiring.  A run
handed off mid-turn (its deadline passed while calls ran) takes that turn up where it stopped,
each call from the state it was left in, the workers' guards deciding (`reopen_turn`).
"""

from __future__ import annotations

from collections.abc import Sequence

from callgate.envelopes import CallResult, TurnRequest, ValidateRequest
from callgate.ledger.approval_steps import Decider, as_decided, held_writes
from callgate.ledger.dispatch import dispatch
from callgate.ledger.resolve_steps import ResolveSteps
from callgate.ledger.tx import Tx
from callgate.records import BatchPolicy, CallRecord, RunRecord, error_result
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
        calls: Sequence[CallRecord] = (),
    ) -> Tx:
        """``run`` (as read, paused incomplete or handed off) → asking the model for ``turn``
        under the new budget; or, handed off mid-turn (``calls``: its turn's, as read), taking
        that turn up again (`reopen_turn`)."""
        tx = self.once(Tx("resume_run"), run.run_id, decider.jti, "resume")
        fields = {
            "turn": turn,
            "max_turns": max_turns,
            "deadline_ms": deadline_ms,
            "max_total_tokens": max_total_tokens,
            "reason": f"resumed by {decider.person}",
        }
        mid_turn = run.status == RunState.HANDED_OFF and bool(calls)
        to_state = self.reopen_turn(tx, run, calls) if mid_turn else RunState.AWAITING_MODEL
        self.run_transition(
            tx, run.run_id, [run.status], to_state, expect_turn=run.turn, fields=fields
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
            mid_turn=mid_turn,
        )
        if mid_turn:
            return tx
        request = TurnRequest(run_id=run.run_id, turn=turn, reason="resume")
        return self.outbox(tx, self.keys.run_stream("turns", run.run_id), request)

    def reopen_turn(self, tx: Tx, run: RunRecord, calls: Sequence[CallRecord]) -> RunState:
        """Take up a turn a hand-off interrupted, guarded on its calls as read; the run's new
        state.  Calls never decided go to the validator again.  Otherwise what the hand-off
        stranded is sent on: the writes a batch held for its approvals (`held_at_hand_off`);
        what was in flight needs nothing, its worker still holds its message.  One result
        message then has model_turn look at the turn (its results may all be in already:
        they settled while the run was handed off, and nobody joined them)."""
        ordered = sorted(calls, key=lambda c: c.index)
        if any(c.state == CallState.REQUESTED for c in ordered):
            self._expect_states(tx, ordered)
            ids = tuple(c.call_id for c in ordered)
            request = ValidateRequest(run_id=run.run_id, turn=run.turn, call_ids=ids)
            self.outbox(tx, self.keys.run_stream("validate", run.run_id), request)
            return RunState.VALIDATING
        held = held_at_hand_off(ordered, run.batch_policy)
        self._expect_states(tx, held)
        dispatch(self, tx, run.run_id, run.turn, [as_decided(c, c.state) for c in held])
        first = ordered[0]
        look = CallResult(
            run_id=run.run_id, turn=run.turn, call_id=first.call_id, state=first.state.value
        )
        self.outbox(tx, self.keys.run_stream("results", run.run_id), look)
        return RunState.EXECUTING

    def _expect_states(self, tx: Tx, calls: Sequence[CallRecord]) -> None:
        for call in calls:
            tx.expect(self.keys.call(call.run_id, call.call_id), "state", call.state)

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


def held_at_hand_off(calls: Sequence[CallRecord], policy: BatchPolicy) -> list[CallRecord]:
    """The calls a batch still held for its approvals when its run was handed off
    (`held_writes`).  Only a hand-off from ``paused_approval`` cancels calls (those still
    waiting for a person), so without a cancelled call nothing was held: every call was sent,
    or chained behind one."""
    if not any(c.state == CallState.CANCELLED for c in calls):
        return []
    return held_writes(calls, policy)
