"""One chaos session: the system it runs on, submitting runs, the approver and the other
simulated people, waiting for the runs to settle, collecting the facts.  The random-fault run
and the crash-point walk both drive one of these.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from callgate.auth.deployment import signer_of
from callgate.auth.keyring import DEFAULT_PEOPLE
from callgate.client import CallgateClient
from callgate.connect import redis_client
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.chaos.approver import APPROVER, Approver
from callgate.ops.chaos.common import REDIS_AWAY, text
from callgate.ops.chaos.facts import UNDER_WAY, Facts, collect, http_json
from callgate.ops.chaos.invariants import settled
from callgate.ops.chaos.people import RESOLVERS, USER, People
from callgate.ops.chaos.recovery import ARQ_WORKERS, arq_serving
from callgate.ops.chaos.replies import Replier
from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.states import CallState

Progress = Callable[[str], None]
ENDED_MID_TURN = frozenset({"cancelled", "failed", "handed_off"})
"""Ends a run may reach while a write of its turn is still settling."""
SUBMIT_LIMIT_S = 60.0
POLL_S = 0.25
READY_TIMEOUT_S = 60.0
SERVING = r'"msg":\s*"serving"'
"""The log line a stream worker prints once it reads its streams
(`callgate.streams.service.serve`)."""
CHAOS_ENV: dict[str, str] = {
    "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.5, 1, 2, 4]",
    "CALLGATE_CLAIM_IDLE_MS": "1000",
    "CALLGATE_HEARTBEAT_MS": "250",
}
"""Every child's settings: dead consumers' messages are reclaimed after 1 s (carol, who
approves, is in the local keyring every system gets)."""


def system_spec(
    replicas: Mapping[str, int], env: Mapping[str, str] | None = None, redis_url: str | None = None
) -> SystemSpec:
    """The whole system with its own Redis (AOF on, so it can be restarted) and the demo
    services, the scripted model server, and ``replicas`` of the worker kinds; the local
    keyring gets alice too (no roles), the user every chaos run acts for, who cancels."""
    return SystemSpec(
        services=("travel", "booking"),
        scripted_model=True,
        replicas=dict(replicas),
        redis="private_aof",
        redis_url=redis_url,
        env={**CHAOS_ENV, **(env or {})},
        people={**DEFAULT_PEOPLE, USER: []},
        grace_s=3.0,
    )


class Session:
    def __init__(self, system: LocalSystem, plans: Sequence[PlannedRun], progress: Progress):
        self.system = system
        self.settings = system.settings
        self.progress = progress
        self.plans = list(plans)
        self.redis = redis_client(self.settings.redis_url)
        keys = Keys(self.settings.key_prefix, self.settings.partitions)
        self.ledger = Ledger(self.redis, keys, self.settings)
        self.client = CallgateClient(self.settings)
        self.approver = Approver(
            self.redis,
            self.ledger,
            {p.run_id: p.decision for p in plans},
            signer_of(self.settings, APPROVER),
        )
        signers = {name: signer_of(self.settings, name) for name in (USER, *RESOLVERS)}
        self.people = People(self.redis, self.ledger, plans, signers, self.booking_url)
        self.replier = Replier(self.client, self.ledger)

    @property
    def booking_url(self) -> str | None:
        return self.system.urls.get("booking")

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every replica of every worker serves: faults before that would hit nothing."""
        deadline = time.monotonic() + timeout_s
        for kind, names in self.system.workers.items():
            if kind in ARQ_WORKERS:
                while not await arq_serving(self.redis, self.settings):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{kind} did not start within {timeout_s:g}s")
                    await asyncio.sleep(POLL_S)
                continue
            for name in names:
                left = max(0.1, deadline - time.monotonic())
                wait = self.system.supervisor.wait_for_line
                await asyncio.to_thread(wait, name, SERVING, left)
        self.progress("every worker is serving")

    async def booking_faults(self, faults: Mapping[str, Any]) -> None:
        if self.booking_url is not None:
            await http_json("POST", f"{self.booking_url}/_faults", dict(faults))

    async def travel_latency(self, seconds: float) -> None:
        if "travel" in self.system.urls:
            slow = {"delay_s": seconds}
            body = {"weather": slow, "train_status": slow}
            await http_json("POST", f"{self.system.urls['travel']}/_config", body)

    async def submit(self, plan: PlannedRun) -> None:
        """Enqueue the run, retrying while Redis is away (the run id makes it idempotent); the
        faults the booking service keeps for this run alone are armed first."""
        faults = plan.booking_faults()
        if faults is not None and self.booking_url is not None:
            await http_json("POST", f"{self.booking_url}/_faults?run_id={plan.run_id}", faults)
        deadline = time.monotonic() + SUBMIT_LIMIT_S
        while True:
            try:
                await self.client.submit(plan.spec())
                return
            except REDIS_AWAY:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(POLL_S)

    async def statuses(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self.ledger.keys.run(run_id), "status")
        replies = await pipe.execute()
        return {r: None if s is None else text(s) for r, s in zip(run_ids, replies, strict=True)}

    async def unsettled(self, run_ids: Sequence[str]) -> list[str]:
        """The runs not yet at rest; while Redis is away, all of them."""
        try:
            found = await self.statuses(run_ids)
            return [
                r
                for r, status in found.items()
                if not settled(status) or not await self._people_done(r, status)
            ]
        except REDIS_AWAY:
            return list(run_ids)

    async def _people_done(self, run_id: str, status: str | None) -> bool:
        """A settled run is at rest once its writes are: one in flight when the run ended
        (cancelled, failed, handed off) has its outcome, a call the plan has a person resolve
        is resolved, a reply planned for it is sent and judged."""
        plan = self.people.plans.get(run_id)
        if plan is not None and plan.reply != "no" and run_id not in self.replier.done:
            return False
        people = plan is not None and (plan.cancel != "no" or plan.resolve != "no")
        if not people and status not in ENDED_MID_TURN:
            return True
        run = await self.ledger.get_run(run_id)
        calls = [] if run is None else await self.ledger.turn_calls(run_id, run.turn)
        resolving = plan is not None and plan.resolve != "no"
        if resolving and status == "paused_unknown_outcome":
            return False  # a person resolves its call, and the run goes on
        busy = UNDER_WAY | {CallState.UNRESOLVED} if resolving else UNDER_WAY
        return not any(c.state in busy for c in calls)

    async def wait_settled(self, run_ids: Sequence[str], timeout_s: float) -> list[str]:
        """Wait until every run is at rest or ``timeout_s`` passed; return those that are not."""
        deadline = time.monotonic() + timeout_s
        reported = 0.0
        while True:
            left = await self.unsettled(run_ids)
            if not left or time.monotonic() > deadline:
                return left
            if time.monotonic() - reported > 10:
                self.progress(f"{len(run_ids) - len(left)}/{len(run_ids)} runs settled")
                reported = time.monotonic()
            await asyncio.sleep(POLL_S)

    async def facts(self) -> Facts:
        return await collect(
            self.ledger, self.plans, self.booking_url, self.system.urls["model"], self.replier.sent
        )

    async def close(self) -> None:
        self.approver.stop()
        self.people.stop()
        await self.replier.stop()
        await self.client.close()
        await self.ledger.aclose()
        await self.redis.aclose()
