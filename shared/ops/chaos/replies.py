"""The run's user replying to a run (a follow-up input, `callgate.conversation`), as a
simulated person: one task per run whose plan has a reply (`Replier.reply`).

* ``after``: once the run has settled (and a person planned to resolve its call has), a reply
  with policy ``reject`` — admitted if the run completed, refused if it ended otherwise;
* ``busy``: soon after submission, while the run is still at work, a reply with policy
  ``enqueue`` — admitted once the run completes; a run that ended otherwise never takes it
  (its job keeps waiting, and the session records no verdict).

The verdict the client gives is kept per run (`callgate.ops.chaos.facts.SentReply`); the
invariants hold it against the run's event log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from callgate.client import CallgateClient
from callgate.errors import JobFailedError
from callgate.ledger.store import Ledger
from callgate.ops.chaos.common import REDIS_AWAY, pause
from callgate.ops.chaos.facts import SentReply
from callgate.ops.chaos.workload import PlannedRun
from callgate.records import RunRecord
from callgate.states import RUN_PAUSED, RUN_TERMINAL, RunState

POLL_S = 0.1
GIVE_UP_S = 180.0
"""A reply not sent by then (the run never settled) is sent anyway: its verdict is checked."""
VERDICT_S = 150.0
"""How long a sent reply's verdict is waited for (the ingress may be killed meanwhile)."""
log = logging.getLogger("callgate.chaos.replies")
Ready = Callable[[PlannedRun, RunRecord | None], bool]


def never_completes(plan: PlannedRun, run: RunRecord | None) -> bool:
    """The run has ended short of completing and nobody planned will move it on."""
    if run is None:
        return False
    if run.status in RUN_TERMINAL - {RunState.COMPLETED}:
        return True
    unknown = run.status == RunState.PAUSED_UNKNOWN_OUTCOME and plan.resolve != "no"
    return run.status in RUN_PAUSED - {RunState.PAUSED_APPROVAL} and not unknown


def at_rest(plan: PlannedRun, run: RunRecord | None) -> bool:
    """The moment for an ``after`` reply: the run completed, or will not complete."""
    return run is not None and (run.status == RunState.COMPLETED or never_completes(plan, run))


class Replier:
    """Sends each planned reply (`reply`, one task per run) and keeps its verdict."""

    def __init__(self, client: CallgateClient, ledger: Ledger) -> None:
        self.client = client
        self.ledger = ledger
        self.sent: dict[str, list[SentReply]] = {}
        self.done: set[str] = set()
        """Runs whose reply task has finished (sent and judged, or given up)."""
        self.tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    def start(self, plan: PlannedRun) -> None:
        if plan.reply != "no":
            self.tasks.append(asyncio.create_task(self.reply(plan)))

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self.tasks)

    async def reply(self, plan: PlannedRun) -> None:
        try:
            if plan.reply == "busy":
                await asyncio.sleep(plan.reply_after_s)
                await self._until(plan, lambda p, run: run is not None)
            else:
                await self._until(plan, at_rest)
            reply_id = await self._send(plan)
            if reply_id is not None:
                verdict = await self._verdict(plan, reply_id)
                self.sent.setdefault(plan.run_id, []).append(
                    SentReply(reply_id, plan.reply_policy, verdict)
                )
        finally:
            self.done.add(plan.run_id)

    async def _run(self, run_id: str) -> RunRecord | None:
        try:
            return await self.ledger.get_run(run_id)
        except REDIS_AWAY:
            return None

    async def _until(self, plan: PlannedRun, ready: Ready) -> None:
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline and not ready(plan, await self._run(plan.run_id)):
            if await pause(self._stop, POLL_S):
                return

    async def _send(self, plan: PlannedRun) -> str | None:
        while not self._stop.is_set():
            try:
                return await self.client.reply(
                    plan.run_id, plan.reply_text, policy=plan.reply_policy
                )
            except REDIS_AWAY as exc:
                log.info("reply: redis unavailable (%s); retrying", type(exc).__name__)
            await pause(self._stop, POLL_S)
        return None

    async def _verdict(self, plan: PlannedRun, reply_id: str) -> str:
        """``admitted`` (also when a rerun of its job found it admitted already), ``refused``,
        or ``none`` once the run will never complete or the wait is over."""
        deadline = time.monotonic() + VERDICT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                await self.client.reply_result(reply_id, timeout_s=1.0)
                return "admitted"
            except JobFailedError:
                return "refused"
            except TimeoutError:
                pass
            except REDIS_AWAY as exc:
                log.info("reply verdict: redis unavailable (%s)", type(exc).__name__)
            if never_completes(plan, await self._run(plan.run_id)):
                return "none"
        return "none"
