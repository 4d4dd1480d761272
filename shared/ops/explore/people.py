"""People's actions the explorer may take, through the same signed decisions and jobs the CLI,
Slack and other services use: carol approves or denies a pending approval — or approves other
arguments than it binds, or posts it on another run's stream; a resolver settles an unknown
outcome as the system of record says, or asks a recheck; alice cancels a run; the run's service
replies to it (a follow-up input; admitted only once the run has completed, and a reply sent
again under its id is admitted at most once).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from callgate.auth.keyring import LOCAL_SUBMITTER
from callgate.auth.tokens import sign_submission
from callgate.conversation import reply_run
from callgate.decisions.desk import ApprovalDesk
from callgate.decisions.record import ApprovalRecord
from callgate.jobs import ReplyJob
from callgate.ops.chaos.facts import SentReply
from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.explore.events import Event
from callgate.ops.explore.world import USER, World
from callgate.records import CallRecord
from callgate.states import RUN_TERMINAL

APPROVER = "carol"
OPERATOR = "operator"
REPLIES_PER_RUN = 2
Act = Callable[[], Awaitable[str | None]]


@dataclass
class People:
    world: World
    plans: Sequence[PlannedRun]
    replies: dict[str, dict[str, str]] = field(default_factory=dict)
    """Run id → reply id → its verdict (``admitted`` once any send of it was)."""

    @property
    def desk(self) -> ApprovalDesk:
        return ApprovalDesk(self.world.redis, self.world.keys, self.world.ledger)

    def sent(self, run_id: str) -> tuple[SentReply, ...]:
        return tuple(
            SentReply(reply_id, "reject", verdict)
            for reply_id, verdict in self.replies.get(run_id, {}).items()
        )

    async def events(self) -> list[Event]:
        found: list[Event] = []
        for record in await self.desk.pending():
            found += [
                Event(
                    f"person:{kind}",
                    f"{APPROVER} {what} {record.call_id} of {record.run_id}",
                    act,
                    record.run_id,
                    record.call_id,
                    fault=True,
                )
                for kind, what, act in self._decisions(record)
            ]
        found += await self.resolutions()
        for plan in self.plans:
            found += await self._of_run(plan)
        return found

    async def _of_run(self, plan: PlannedRun) -> list[Event]:
        run_id = plan.run_id
        run = await self.world.ledger.get_run(run_id)
        if run is None:
            return []
        sent = self.replies.get(run_id, {})
        number = len(sent) + 1
        found = []
        if number <= REPLIES_PER_RUN:
            found.append(
                Event(
                    "person:reply",
                    f"the service replies to {run_id} (reply {number})",
                    self._reply(plan, f"{run_id}-r{number}"),
                    run_id,
                    fault=True,
                )
            )
        last = f"{run_id}-r{number - 1}"
        if sent.get(last) == "admitted":
            found.append(
                Event(
                    "person:reply",
                    f"the service sends reply {number - 1} to {run_id} again",
                    self._reply(plan, last),
                    run_id,
                    fault=True,
                )
            )
        if run.status not in RUN_TERMINAL:
            cancel = functools.partial(self.desk.control, run, "cancel", self.world.signers[USER])
            found.append(
                Event(
                    "person:cancel", f"{USER} cancels {run_id}", _posted(cancel), run_id, fault=True
                )
            )
        return found

    async def resolutions(self) -> list[Event]:
        """A person settles each unresolved call (the one pause the drain does not wait out:
        only a person can clear it, and the invariants hold its outcome to the truth)."""
        return [
            Event(
                "person:resolve",
                f"a person resolves {call.call_id} of {call.run_id}",
                self._resolve(call),
                call.run_id,
                call.call_id,
                fault=True,
            )
            for call in await self.desk.unresolved()
        ]

    def _decisions(self, record: ApprovalRecord) -> list[tuple[str, str, Act]]:
        """(kind, what the person does, the act) for each decision on ``record``."""
        desk, signer = self.desk, self.world.signers[APPROVER]
        other = next((p.run_id for p in self.plans if p.run_id != record.run_id), None)
        found: list[tuple[str, str, Callable[[], Awaitable[Any]]]] = [
            ("approve", "approves", lambda: desk.post(record, "approve", signer)),
            ("deny", "denies", lambda: desk.post(record, "deny", signer, reason="no")),
            (
                "approve_other_arguments",
                "approves other arguments than those of",
                lambda: desk.post(record, "approve", signer, args_hash="0" * 64),
            ),
        ]
        if other is not None:
            moved = record.model_copy(update={"run_id": other})
            found.append(
                (
                    "approve_on_another_run",
                    f"approves, on {other}'s stream,",
                    lambda: desk.post(moved, "approve", signer),
                )
            )
        return [(kind, what, _posted(make)) for kind, what, make in found]

    def _resolve(self, call: CallRecord) -> Act:
        async def act() -> str | None:
            signer = self.world.signers[APPROVER if call.approval_id else OPERATOR]
            how = self.world.choices.answer("resolution", ("truth", "recheck"))
            found = self.world.store.effects.get(call.operation_id or "")
            if how == "recheck":
                await self.desk.resolve(call, "recheck", signer)
            elif found is None:
                await self.desk.resolve(call, "not_applied", signer)
            else:
                await self.desk.resolve(call, "applied", signer, result=found)
            return how if found is None else f"{how} (applied)"

        return act

    def _reply(self, plan: PlannedRun, reply_id: str) -> Act:
        """The ingress's ``reply_run`` job for a follow-up, signed by the run's service."""
        run_id = plan.run_id

        async def act() -> str | None:
            fields: dict[str, Any] = {
                "run_id": run_id,
                "reply_id": reply_id,
                "input": plan.reply_text,
                "policy": "reject",
            }
            unsigned = ReplyJob(**fields, token="unsigned")
            token = sign_submission(
                self.world.signers[LOCAL_SUBMITTER], run_id=run_id, spec=unsigned.signed_part()
            )
            job = ReplyJob(**fields, token=token).model_dump()
            verdicts = self.replies.setdefault(run_id, {})
            try:
                done = await reply_run({"runtime": self.world.ingress, "job_try": 1}, job)
            except Exception as exc:  # refused: the run is busy, or ended otherwise
                verdicts.setdefault(reply_id, "refused")
                return f"refused: {type(exc).__name__}"
            if done.get("admitted"):
                verdicts[reply_id] = "admitted"
            verdicts.setdefault(reply_id, "refused")
            return "admitted" if done.get("admitted") else str(done.get("detail"))

        return act


def _posted(make: Callable[[], Awaitable[Any]]) -> Act:
    async def act() -> str | None:
        await make()
        return None

    return act
