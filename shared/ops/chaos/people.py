"""Simulated people taking a run's ways out (DESIGN §10) through the same signed decisions
the CLI, Slack and the approver post: the run's user cancels it, a resolver settles a write
whose outcome stayed unknown.

* a cancel comes at the planned moment after submission, or as soon as one of the run's
  writes is ``executing`` (its booking request is then held by the service); it is posted
  even when the run has ended by then, so refusals are exercised too;
* a resolution is for a call in the unresolved inbox of a run planned for it.  The resolver
  first looks at the booking service itself — without the run's header, so the lookup
  faults armed for that run do not apply, as a person would open the system of record — and
  says applied (with the reservation it found) or not applied; or, for a recheck, lets the
  run's lookups work again and asks callgate to look once more.

Everything is retried while Redis is away; the validator, not this module, decides whether a
decision applies, and the run's event log is what the invariants read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from callgate.auth.tokens import Signer
from callgate.connect import RedisClient
from callgate.decisions.desk import ApprovalDesk
from callgate.ledger.store import Ledger
from callgate.ops.chaos.common import REDIS_AWAY, poll
from callgate.ops.chaos.workload import PlannedRun
from callgate.records import CallRecord, RunRecord
from callgate.states import RUN_TERMINAL, CallState

USER = "alice"
"""Every chaos run acts for alice, so she may cancel it."""
RESOLVERS = ("carol", "operator")
"""carol (events-lead) resolves an approved reservation; an operator anything else."""
POLL_S = 0.1
IN_FLIGHT_POLL_S = 0.02
GIVE_UP_S = 180.0
"""A cancel not posted by then (the run never appeared) is counted as missed."""
log = logging.getLogger("callgate.chaos.people")


@dataclass
class PeopleStats:
    cancels_posted: int = 0
    cancels_missed: int = 0
    """Cancels planned for a write in flight whose run ended before the write went out."""
    resolves_posted: Counter[str] = field(default_factory=Counter)
    """Outcome → resolutions posted (applied, not_applied, recheck)."""
    resolved: set[str] = field(default_factory=set)
    """``run_id call_id`` of the calls a resolution was posted for."""


class People:
    """The cancels of ``plans`` (one task each, `cancel`) and the resolver (`run`, polling
    until `stop`)."""

    def __init__(
        self,
        redis: RedisClient,
        ledger: Ledger,
        plans: Sequence[PlannedRun],
        signers: Mapping[str, Signer],
        booking_url: str | None,
    ) -> None:
        self.ledger = ledger
        self.desk = ApprovalDesk(redis, ledger.keys, ledger)
        self.plans = {p.run_id: p for p in plans}
        self.signers = signers
        self.booking_url = booking_url
        self.stats = PeopleStats()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def cancel(self, plan: PlannedRun) -> None:
        """Cancel ``plan``'s run as its user, when the plan says (call right after submitting)."""
        if plan.cancel == "at":
            await asyncio.sleep(plan.cancel_after_s)
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                run = await self._cancel_moment(plan)
                if run is not None:
                    await self.desk.control(
                        run, "cancel", self.signers[USER], budget={"reason": "chaos: plans changed"}
                    )
                    self.stats.cancels_posted += 1
                    return
            except REDIS_AWAY as exc:
                log.info("cancel: redis unavailable (%s); retrying", type(exc).__name__)
            except _Missed:
                break
            await asyncio.sleep(IN_FLIGHT_POLL_S)
        self.stats.cancels_missed += 1

    async def _cancel_moment(self, plan: PlannedRun) -> RunRecord | None:
        """The run if now is the moment to cancel it, else None; `_Missed` if it never will be."""
        run = await self.ledger.get_run(plan.run_id)
        if run is None or plan.cancel == "at":
            return run
        calls = await self.ledger.turn_calls(run.run_id, run.turn)
        if any(c.effect != "read" and c.state == CallState.EXECUTING for c in calls):
            return run
        if run.status in RUN_TERMINAL:
            raise _Missed
        return None

    async def run(self) -> None:
        await poll(self._resolve_round, self._stop, POLL_S, log, "resolver")

    async def _resolve_round(self) -> None:
        try:
            await self.resolve_pending()
        except aiohttp.ClientError as exc:
            log.info("resolver: booking service: %s; retrying", exc)

    async def resolve_pending(self) -> None:
        for call in await self.desk.unresolved(limit=1000):
            plan = self.plans.get(call.run_id)
            key = f"{call.run_id} {call.call_id}"
            if plan is None or plan.resolve == "no" or key in self.stats.resolved:
                continue
            await self._resolve(plan, call)

    async def _resolve(self, plan: PlannedRun, call: CallRecord) -> None:
        signer = self.signers[RESOLVERS[0] if call.approval_id else RESOLVERS[1]]
        if plan.resolve == "recheck":
            await self._booking("POST", f"/_faults?run_id={plan.run_id}", {"lookup": None})
            await self.desk.resolve(call, "recheck", signer, reason="chaos: look again")
            outcome = "recheck"
        else:
            found = await self._booking("GET", f"/reservations/{call.operation_id}")
            if found is None:
                return
            applied = bool(found)
            await self.desk.resolve(
                call,
                "applied" if applied else "not_applied",
                signer,
                result=found or None,
                reason="chaos: checked the booking service",
            )
            outcome = "applied" if applied else "not_applied"
        self.stats.resolved.add(f"{call.run_id} {call.call_id}")
        self.stats.resolves_posted[outcome] += 1

    async def _booking(
        self, method: str, path: str, body: object = None
    ) -> dict[str, object] | None:
        """The booking service's answer: its JSON on 200, ``{}`` on 404, None otherwise."""
        if self.booking_url is None:
            return None
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"{self.booking_url}{path}", json=body) as reply,
        ):
            if reply.status == 404:
                return {}
            if reply.status != 200:
                return None
            found = await reply.json()
        return found if isinstance(found, dict) else None


class _Missed(Exception):
    """The run ended before the moment its cancel waited for."""
