"""How a person's signed cancel or resume is applied, inside the validator.

The token was verified already (`callgate.decisions.flow`).  Who may: the person the run acts
for, or anyone holding the deployment's operator role.  What may: cancel any run not ended;
resume a run paused incomplete or handed off (at a turn's start, or mid-turn — its deadline
passed while calls ran —, when its turn is taken up again: `ControlSteps.reopen_turn`).  The new
turn budget must leave room for the turn it asks.  Anything else is refused
with the reason, in the log and the run's trace (``control.refused``), and changes nothing.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from callgate.auth.tokens import VerifiedDecision
from callgate.clock import now_ms
from callgate.decisions.claims import ControlClaims
from callgate.decisions.refusal import refuse
from callgate.ledger.approval_steps import Decider
from callgate.ledger.control_steps import RESUMABLE
from callgate.logs import log_fields
from callgate.records import RunRecord
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.service import Runtime
from callgate.telemetry import spans

log = logging.getLogger("callgate.control")


def resume_turn(run: RunRecord) -> int:
    """The turn a resumed run asks: the next after a truncated one, else the one it never
    asked."""
    return run.turn + 1 if run.status == RunState.PAUSED_INCOMPLETE else run.turn


def refusal(
    run: RunRecord | None, claims: ControlClaims, decided: VerifiedDecision, operator_role: str
) -> str | None:
    """Why the cancel or resume must not apply, or None if it may (pure)."""
    if run is None:
        return "no such run"
    if decided.person != run.identity.get("user") and operator_role not in decided.roles:
        return f"{decided.person} is neither the run's user nor holds the role {operator_role}"
    if claims.act == "cancel":
        return f"the run has ended ({run.status.value})" if run.status in RUN_TERMINAL else None
    if run.status not in RESUMABLE:
        return f"the run is {run.status.value}: only a run paused incomplete or handed off resumes"
    max_turns = claims.max_turns or max(run.max_turns, resume_turn(run))
    if max_turns < resume_turn(run):
        return f"max_turns {max_turns} leaves no room for turn {resume_turn(run)}"
    return None


class ControlFlow:
    """Applies verified cancels and resumes."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger

    async def on_control(
        self, msg_id: str, token: str, claims: ControlClaims, decided: VerifiedDecision
    ) -> None:
        run = await self.ledger.get_run(claims.run)
        calls = [] if run is None else await self.ledger.turn_calls(run.run_id, run.turn)
        operator = self.rt.trust.current().operator_role
        reason = refusal(run, claims, decided, operator)
        if reason is not None:
            await self._refuse(claims.run, msg_id, reason, decided.person)
            return
        assert run is not None
        decider = Decider(decided.person, decided.signer, token, claims.jti)
        if claims.act == "cancel":
            tx = await self.ledger.cancel_run(
                run, calls, decider, reason=claims.reason, msg_id=msg_id
            )
        else:
            budget = _budget(run, claims)
            tx = await self.ledger.resume_run(
                run,
                decider,
                turn=budget.turn,
                max_turns=budget.max_turns,
                deadline_ms=budget.deadline_ms,
                max_total_tokens=budget.max_total_tokens,
                msg_id=msg_id,
                calls=calls,
            )
        if (await self.ledger.apply(tx)).ok:
            log.info(
                f"run {claims.act}", extra=log_fields(run_id=run.run_id, person=decided.person)
            )
            if claims.act == "cancel":
                spans.run_ended(run, RunState.CANCELLED)
            return
        await self._refuse(
            claims.run,
            msg_id,
            "the run moved on meanwhile, or this decision "
            "was applied already; look again and decide anew",
            decided.person,
        )

    async def _refuse(self, run_id: str, msg_id: str, reason: str, person: str) -> None:
        await refuse(self.ledger, "control.refused", run_id, msg_id, reason, person)


class Budget(NamedTuple):
    """What a resumed run asks next, and under which budget."""

    turn: int
    max_turns: int
    deadline_ms: int | None
    max_total_tokens: int | None


def _budget(run: RunRecord, claims: ControlClaims) -> Budget:
    """The resumed run's budget: what the person gave, else what it had (a deadline already
    past is dropped)."""
    now = now_ms()
    if claims.deadline_s is not None:
        deadline: int | None = now + int(claims.deadline_s * 1000)
    else:
        deadline = run.deadline_ms if run.deadline_ms and run.deadline_ms > now else None
    turn = resume_turn(run)
    return Budget(
        turn,
        claims.max_turns or max(run.max_turns, turn),
        deadline,
        claims.max_total_tokens or run.max_total_tokens,
    )
