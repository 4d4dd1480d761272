"""Find pending approvals, post a human's decision, and learn whether the validator applied it.

What `callgate approvals` / `approve` / `deny` and `callgate demo workshop` share.  A decision
goes onto the run's approvals stream exactly as the Slack bot posts it; the validator alone
decides whether it applies, and says so in the run's event log (``approval.approved`` /
``approval.denied`` / ``approval.refused``, each carrying the decision's ``msg_id``), which is
what `wait_outcome` reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import redis.asyncio as aioredis

from callgate.approvals.record import ApprovalRecord
from callgate.envelopes import ApprovalDecision
from callgate.keys import Keys
from callgate.ledger.store import Ledger, redis_errors
from callgate.records import Event
from callgate.streams.commands import post

DecisionKind = Literal["approve", "deny"]
OUTCOME_EVENTS = frozenset({"approval.approved", "approval.denied", "approval.refused"})


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the validator did with one decision."""

    applied: bool
    event: str
    """``approval.approved``, ``approval.denied`` or ``approval.refused``."""
    reason: str | None = None


class ApprovalDesk:
    """The approvals of one deployment (its Redis and key prefix), for people and scripts."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.redis = redis
        self.keys = keys
        self.ledger = ledger

    async def pending(self, limit: int = 100) -> list[ApprovalRecord]:
        """Pending approvals of every partition, soonest expiry first."""
        refs: list[tuple[float, str, str]] = []
        with redis_errors():
            for partition in range(self.keys.partitions):
                index = self.keys.pending_approvals(partition)
                for member, score in await self.redis.zrange(index, 0, limit - 1, withscores=True):
                    run_id, _, approval_id = _text(member).partition(" ")
                    refs.append((score, run_id, approval_id))
        records = []
        for _, run_id, approval_id in sorted(refs)[:limit]:
            record = await self.ledger.get_approval(run_id, approval_id)
            if record is not None and record.state == "pending":
                records.append(record)
        return records

    async def find(self, approval_id: str) -> ApprovalRecord | None:
        """The pending approval with this id, wherever its run lives (None if not pending)."""
        with redis_errors():
            for partition in range(self.keys.partitions):
                index = self.keys.pending_approvals(partition)
                async for member, _ in self.redis.zscan_iter(index, match=f"* {approval_id}"):
                    run_id = _text(member).partition(" ")[0]
                    return await self.ledger.get_approval(run_id, approval_id)
        return None

    async def post(
        self,
        record: ApprovalRecord,
        decision: DecisionKind,
        approver: str,
        *,
        reason: str | None = None,
        args_hash: str | None = None,
        source: Literal["slack", "cli", "api"] = "cli",
    ) -> ApprovalDecision:
        """Post a decision on ``record`` (for the arguments it binds, unless ``args_hash``)."""
        message = ApprovalDecision(
            run_id=record.run_id,
            turn=record.turn,
            call_id=record.call_id,
            approval_id=record.approval_id,
            decision=decision,
            approver=approver,
            args_hash=args_hash or record.args_hash,
            reason=reason,
            source=source,
        )
        with redis_errors():
            await post(self.redis, self.keys.run_stream("approvals", record.run_id), message)
        return message

    async def last_event_id(self, run_id: str) -> str:
        """Read this *before* posting, so `wait_outcome` cannot miss a fast validator."""
        with redis_errors():
            entries = await self.redis.xrevrange(self.keys.events(run_id), count=1)
        return _text(entries[0][0]) if entries else "0-0"

    async def wait_outcome(
        self, message: ApprovalDecision, after_id: str, timeout_s: float
    ) -> Outcome | None:
        """The validator's verdict on ``message``, or None if none came within ``timeout_s``."""
        stream = self.keys.events(message.run_id)
        deadline = time.monotonic() + timeout_s
        cursor = after_id
        while (left_s := deadline - time.monotonic()) > 0:
            with redis_errors():
                reply = await self.redis.xread(
                    {stream: cursor}, count=100, block=max(1, int(left_s * 1000))
                )
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    cursor = _text(entry_id)
                    event = Event.from_entry(entry_id, fields)
                    if event.type in OUTCOME_EVENTS and event.data.get("msg_id") == message.msg_id:
                        reason = event.data.get("reason")
                        return Outcome(
                            applied=event.type != "approval.refused",
                            event=event.type,
                            reason=None if reason is None else str(reason),
                        )
        return None
