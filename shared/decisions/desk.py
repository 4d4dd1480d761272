"""Find pending approvals, post a person's signed decision (approve, deny, resolve an unknown
outcome), and learn what the validator did.

What `callgate approvals` / `approve` / `deny`, `callgate demo workshop`, the Slack bot and the
HTTP API share.  A decision is signed with the key of the person deciding (or of a delegate
that speaks for them) and goes onto the run's decisions stream; the validator alone decides
whether it applies, and says so in the run's event log (``approval.approved`` /
``approval.denied`` / ``approval.refused`` / ``call.resolved`` / ``resolve.refused``, each
carrying the decision's ``msg_id``), which is what `wait_outcome` reads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from callgate.auth.tokens import Signer, sign_decision
from callgate.connect import RedisClient
from callgate.decisions.claims import (
    DecisionKind,
    ResolveOutcome,
    approval_claims,
    control_claims,
    resolve_claims,
)
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import SignedDecision, new_id
from callgate.keys import IndexOf, Keys
from callgate.ledger.store import Ledger, redis_errors
from callgate.records import CallRecord, RunRecord, entry_events
from callgate.states import CallState
from callgate.streams.commands import post

__all__ = ["ApprovalDesk", "DecisionKind", "Outcome", "last_event_id", "wait_outcome"]

OUTCOME_EVENTS = frozenset(
    {
        "approval.approved",
        "approval.denied",
        "approval.refused",
        "call.resolved",
        "resolve.refused",
        "run.cancelled",
        "run.resumed",
        "control.refused",
    }
)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the validator did with one decision."""

    applied: bool
    event: str
    """One of `OUTCOME_EVENTS` (``approval.approved``, ``call.resolved``, ``resolve.refused``…)."""
    reason: str | None = None


class ApprovalDesk:
    """The approvals of one deployment (its Redis and key prefix), for people and scripts."""

    def __init__(
        self, redis: RedisClient, keys: Keys, ledger: Ledger, tenant: str | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.ledger = ledger
        # With a tenant, its own copies of the inbox indices are read (`callgate.keys`): its
        # login may read those and no other tenant's, nor the partition's.
        self.tenant = tenant

    async def pending(self, limit: int = 100) -> list[ApprovalRecord]:
        """Pending approvals of every partition, soonest expiry first."""
        records = []
        for run_id, approval_id in await self._indexed(self.keys.pending_approvals, limit):
            record = await self.ledger.get_approval(run_id, approval_id)
            if record is not None and record.state == "pending":
                records.append(record)
        return records

    async def unresolved(self, limit: int = 100) -> list[CallRecord]:
        """Calls whose write outcome a person must resolve, of every partition, oldest first."""
        found = []
        for run_id, call_id in await self._indexed(self.keys.unresolved_calls, limit):
            call = await self.ledger.get_call(run_id, call_id)
            if call is not None and call.state == CallState.UNRESOLVED:
                found.append(call)
        return found

    async def _indexed(self, index_of: IndexOf, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` ``(run id, id)`` of a per-partition ``"<run_id> <id>"`` index
        (the tenant's copy, with a tenant), by score across every partition."""
        refs: list[tuple[float, str, str]] = []
        with redis_errors():
            for partition in range(self.keys.partitions):
                index = index_of(partition, self.tenant)
                for member, score in await self.redis.zrange(index, 0, limit - 1, withscores=True):
                    run_id, _, item_id = _text(member).partition(" ")
                    refs.append((score, run_id, item_id))
        return [(run_id, item_id) for _, run_id, item_id in sorted(refs)[:limit]]

    async def find(self, approval_id: str) -> ApprovalRecord | None:
        """The pending approval with this id, wherever its run lives (None if not pending)."""
        with redis_errors():
            for partition in range(self.keys.partitions):
                index = self.keys.pending_approvals(partition, self.tenant)
                async for member, _ in self.redis.zscan_iter(index, match=f"* {approval_id}"):
                    run_id = _text(member).partition(" ")[0]
                    return await self.ledger.get_approval(run_id, approval_id)
        return None

    async def post(
        self,
        record: ApprovalRecord,
        decision: DecisionKind,
        signer: Signer,
        *,
        person: str | None = None,
        reason: str | None = None,
        args_hash: str | None = None,
    ) -> SignedDecision:
        """Sign and post a decision on ``record`` as ``person`` (default: the signer, deciding
        for themselves), for the arguments it binds unless ``args_hash`` says otherwise."""
        jti = new_id()
        claims = approval_claims(
            decision,
            run=record.run_id,
            apr=record.approval_id,
            call=record.call_id,
            hash=args_hash or record.args_hash,
            reason=reason,
            jti=jti,
        )
        token = sign_decision(signer, person=person or signer.key_id, claims=claims)
        return await self.post_signed(record.run_id, record.turn, token, jti)

    async def resolve(
        self,
        call: CallRecord,
        outcome: ResolveOutcome,
        signer: Signer,
        *,
        result: dict[str, object] | None = None,
        reason: str | None = None,
        person: str | None = None,
    ) -> SignedDecision:
        """Sign and post a resolution of ``call``'s unknown outcome, bound to its operation id."""
        jti = new_id()
        claims = resolve_claims(
            run=call.run_id,
            call=call.call_id,
            op=call.operation_id or "",
            outcome=outcome,
            result=result,
            reason=reason,
            jti=jti,
        )
        token = sign_decision(signer, person=person or signer.key_id, claims=claims)
        return await self.post_signed(call.run_id, call.turn, token, jti)

    async def control(
        self,
        run: RunRecord,
        act: Literal["cancel", "resume"],
        signer: Signer,
        *,
        budget: Mapping[str, float | str | None] | None = None,
        person: str | None = None,
    ) -> SignedDecision:
        """Sign and post a cancel or resume of ``run`` (``budget``: reason, max_turns,
        deadline_s, max_total_tokens, as `ControlClaims` takes them)."""
        jti = new_id()
        given = {name: value for name, value in (budget or {}).items() if value is not None}
        claims = control_claims(act=act, run=run.run_id, jti=jti, **given)
        token = sign_decision(signer, person=person or signer.key_id, claims=claims)
        return await self.post_signed(run.run_id, run.turn, token, jti)

    async def post_signed(self, run_id: str, turn: int, token: str, jti: str) -> SignedDecision:
        """Post a decision someone signed (``jti`` is its token's id, for `wait_outcome`)."""
        message = SignedDecision(msg_id=jti, run_id=run_id, turn=turn, token=token)
        with redis_errors():
            await post(self.redis, self.keys.run_stream("decisions", run_id), message)
        return message

    async def last_event_id(self, run_id: str) -> str:
        """Read this *before* posting, so `wait_outcome` cannot miss a fast validator."""
        return await last_event_id(self.redis, self.keys, run_id)

    async def wait_outcome(
        self, message: SignedDecision, after_id: str, timeout_s: float
    ) -> Outcome | None:
        """The validator's verdict on ``message``, or None if none came within ``timeout_s``."""
        return await wait_outcome(self.redis, self.keys, message, after_id, timeout_s)


async def last_event_id(redis: RedisClient, keys: Keys, run_id: str) -> str:
    """The run's newest event id: read *before* posting, so `wait_outcome` misses nothing.
    (Free of the ledger, so the Slack bot, which may read only events, can use it.)"""
    with redis_errors():
        entries = await redis.xrevrange(keys.events(run_id), count=1)
    return _text(entries[0][0]) if entries else "0-0"


async def wait_outcome(
    redis: RedisClient, keys: Keys, message: SignedDecision, after_id: str, timeout_s: float
) -> Outcome | None:
    """The validator's verdict on ``message``, or None if none came within ``timeout_s``."""
    stream = keys.events(message.run_id)
    deadline = time.monotonic() + timeout_s
    cursor = after_id
    while (left_s := deadline - time.monotonic()) > 0:
        with redis_errors():
            reply = await redis.xread({stream: cursor}, count=100, block=max(1, int(left_s * 1000)))
        for _, entries in reply or []:
            for entry_id, fields in entries:
                cursor = _text(entry_id)
                for event in entry_events(entry_id, fields):
                    if event.type in OUTCOME_EVENTS and event.data.get("msg_id") == message.msg_id:
                        reason = event.data.get("reason")
                        return Outcome(
                            applied=not event.type.endswith(".refused"),
                            event=event.type,
                            reason=None if reason is None else str(reason),
                        )
    return None
