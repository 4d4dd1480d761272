"""A simulated approver: decides pending approvals as ``carol`` (events-lead), signed with her
key, through the same decisions stream the Slack bot and `callgate approve` use.

It reads the pending-approvals index, reads each approval record (the arguments hash it
binds), and posts one signed decision per approval — approve or deny as the run's plan
says; an approval the plan leaves to expire gets nothing.  Posting is retried while Redis is
away; a decision already on the stream is never posted again, because the validator (and
Redis, with AOF) keep it across crashes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from callgate.auth.tokens import Signer
from callgate.connect import RedisClient
from callgate.decisions.desk import ApprovalDesk
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.chaos.common import poll, text
from callgate.ops.chaos.workload import Decision

APPROVER = "carol"
POLL_S = 0.1
log = logging.getLogger("callgate.chaos.approver")


@dataclass
class ApproverStats:
    approved: int = 0
    denied: int = 0
    posted: set[str] = field(default_factory=set)
    """Approval ids decided (posted to the stream)."""


class Approver:
    """Polls until `stop`; ``plan`` maps run id → its decision (absent: approve)."""

    def __init__(
        self, redis: RedisClient, ledger: Ledger, plan: Mapping[str, Decision], signer: Signer
    ) -> None:
        self.redis = redis
        self.ledger = ledger
        self.desk = ApprovalDesk(redis, ledger.keys, ledger)
        self.signer = signer
        self.keys: Keys = ledger.keys
        self.plan = plan
        self.stats = ApproverStats()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        await poll(self.decide_pending, self._stop, POLL_S, log, "approver")

    async def decide_pending(self) -> None:
        for partition in range(self.keys.partitions):
            members = await self.redis.zrange(self.keys.pending_approvals(partition), 0, -1)
            for member in members:
                run_id, _, approval_id = text(member).partition(" ")
                if approval_id and approval_id not in self.stats.posted:
                    await self._decide(run_id, approval_id)

    async def _decide(self, run_id: str, approval_id: str) -> None:
        decision = self.plan.get(run_id, "approve")
        if decision == "expire":
            return
        record = await self.ledger.get_approval(run_id, approval_id)
        if record is None or record.state != "pending":
            return
        approve = decision == "approve"
        reason = None if approve else "chaos: the simulated approver said no"
        await self.desk.post(record, "approve" if approve else "deny", self.signer, reason=reason)
        self.stats.posted.add(approval_id)
        if approve:
            self.stats.approved += 1
        else:
            self.stats.denied += 1
