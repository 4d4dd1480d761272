"""How a person's signed decision — on a pending approval, resolving an unknown outcome
(`callgate.decisions.resolve`), cancelling or resuming a run (`callgate.decisions.control`) —
or an approval's expiry is applied, inside the validator.

A decision is trusted only when its token verifies against a key the deployment knows for that
person (or for a delegate that speaks for them, such as the Slack bot): an unsigned, badly
signed, expired or foreign decision is refused with the reason, in the log and in the run's
trace, before anything else is read.  The rule (`callgate.decisions.record.refusal`) then says
whether it may apply; the step (`Ledger.apply_approval`) applies it reserve-then-consume,
guarded on the approval still ``pending``, its call ``needs_approval`` and the token never seen
before.  Two decisions on one batch racing on two replicas serialize on each other's call
state: the loser re-reads and retries, so the batch is released exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from callgate.auth.tokens import VerifiedDecision, verify_decision
from callgate.clock import now_ms
from callgate.crashpoints import crash_point
from callgate.decisions.claims import (
    ApprovalClaims,
    read_approval_claims,
    read_control_claims,
    read_resolve_claims,
)
from callgate.decisions.control import ControlFlow
from callgate.decisions.record import ApprovalRecord, refusal
from callgate.decisions.refusal import refuse
from callgate.decisions.resolve import ResolveFlow
from callgate.envelopes import ApprovalExpired, SignedDecision
from callgate.errors import AuthError
from callgate.ledger.approval_steps import Decider
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
        self.resolutions = ResolveFlow(runtime)
        self.controls = ControlFlow(runtime)

    async def on_decision(self, message: SignedDecision) -> None:
        """Verify the token first; then apply it as what its signed ``act`` says it is."""
        try:
            decided = verify_decision(message.token, self.rt.trust.current(), now=now_ms() / 1000)
            if decided.claims.get("run") != message.run_id:
                raise AuthError("the decision is signed for another run")
            act = decided.claims.get("act")
            if act == "resolve":
                resolved = read_resolve_claims(decided.claims)
                await self.resolutions.on_resolve(message.msg_id, message.token, resolved, decided)
                return
            if act in ("cancel", "resume"):
                control = read_control_claims(decided.claims)
                await self.controls.on_control(message.msg_id, message.token, control, decided)
                return
            claims = read_approval_claims(decided.claims)
        except AuthError as exc:
            await self._refuse(message.run_id, message.msg_id, exc.reason, None)
            return
        await self._retrying(lambda: self._decide(message, claims, decided), message)

    async def on_expiry(self, message: ApprovalExpired) -> None:
        await self._retrying(lambda: self._expire(message), message)

    async def _retrying(
        self, attempt: Callable[[], Awaitable[Result]], message: SignedDecision | ApprovalExpired
    ) -> None:
        for _ in range(MAX_RACE_RETRIES):
            if await attempt() == "done":
                return
        log.warning("approval race retries exhausted", extra=log_fields(run_id=message.run_id))
        raise RuntimeError("approval decision kept losing races; will be redelivered")

    async def _decide(
        self, message: SignedDecision, claims: ApprovalClaims, decided: VerifiedDecision
    ) -> Result:
        record = await self.ledger.get_approval(claims.run, claims.apr)
        reason = refusal(record, claims, decided, now_ms())
        if reason is not None:
            await self._refuse(claims.run, message.msg_id, reason, decided.person)
            return "done"
        assert record is not None
        to = CallState.APPROVED if claims.act == "approve" else CallState.DENIED
        decider = Decider(decided.person, decided.signer, message.token, claims.jti)
        return await self._apply(record, to, message.msg_id, decider, claims.reason)

    async def _expire(self, message: ApprovalExpired) -> Result:
        record = await self.ledger.get_approval(message.run_id, message.approval_id)
        if record is None or record.state != "pending" or now_ms() < record.expires_ms:
            return "done"
        return await self._apply(
            record, CallState.EXPIRED, message.msg_id, None, "approval expired"
        )

    async def _apply(
        self,
        record: ApprovalRecord,
        to: CallState,
        msg_id: str,
        decider: Decider | None,
        reason: str | None,
    ) -> Result:
        run = await self.ledger.get_run(record.run_id)
        if run is None:
            return "done"
        calls = await self.ledger.turn_calls(record.run_id, record.turn)
        tx = self.ledger.apply_approval(
            record,
            to,
            calls,
            msg_id=msg_id,
            decider=decider,
            reason=reason,
            policy=run.batch_policy,
        )
        crash_point("validator.mid_approval")
        result = await self.ledger.apply(tx)
        if result.ok or result.failed is None:
            return "done"
        keys = self.rt.keys
        if result.failed.key == keys.approval(record.run_id, record.approval_id):
            await self._refuse(record.run_id, msg_id, "already decided", None)
            return "done"
        if result.failed.key == keys.decisions_seen(record.run_id):
            await self._refuse(record.run_id, msg_id, "this decision was applied already", None)
            return "done"
        return "retry" if result.failed.key != keys.run(record.run_id) else "done"

    async def _refuse(self, run_id: str, msg_id: str, reason: str, person: str | None) -> None:
        await refuse(self.ledger, "approval.refused", run_id, msg_id, reason, person)
