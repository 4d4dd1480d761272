"""How a person's signed resolution of an unknown outcome is applied, inside the validator.

The token was verified already (`callgate.decisions.flow`): a key the deployment knows for that
person signed it.  The rule (`refusal`) then says whether this person may resolve this call now:
the call is ``unresolved``, the decision names its operation id, and the person holds a resolver
role — the role the tool's approval rule names for this call, or the deployment's operator role.
Anything else is refused with the reason, in the log and the run's trace, and changes nothing.
"""

from __future__ import annotations

import logging

from callgate.auth.tokens import VerifiedDecision
from callgate.decisions.claims import ResolveClaims
from callgate.decisions.refusal import refuse
from callgate.ledger.approval_steps import Decider
from callgate.logs import log_fields
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState
from callgate.streams.service import Runtime
from callgate.tools.contract import Identity

log = logging.getLogger("callgate.resolve")


def resolver_roles(runtime: Runtime, run: RunRecord, call: CallRecord) -> frozenset[str]:
    """Who may resolve ``call``: its approver role (if the tool's rule names one for these
    arguments and this identity) and, always, the deployment's operator role."""
    roles = {runtime.trust.current().operator_role}
    tool = runtime.registry.get(call.tool)
    if tool is not None and call.arguments is not None:
        try:
            role = tool.approval(
                Identity.model_validate(run.identity), tool.validate(call.arguments)
            )
        except ValueError:  # pydantic's ValidationError included
            role = None
        if role is not None:
            roles.add(role)
    return frozenset(roles)


def refusal(
    call: CallRecord | None,
    claims: ResolveClaims,
    decided: VerifiedDecision,
    allowed_roles: frozenset[str],
) -> str | None:
    """Why the resolution must not apply, or None if it may (pure)."""
    if call is None:
        return "no such call"
    if call.state != CallState.UNRESOLVED:
        return f"the call is {call.state.value}, not unresolved"
    if claims.op != (call.operation_id or ""):
        return "the decision names another operation id than the call's"
    if not allowed_roles & decided.roles:
        return f"{decided.person} holds none of the resolver roles {sorted(allowed_roles)}"
    return None


class ResolveFlow:
    """Applies verified resolutions."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger

    async def refuse(self, run_id: str, msg_id: str, reason: str, person: str) -> None:
        await refuse(self.ledger, "resolve.refused", run_id, msg_id, reason, person)

    async def on_resolve(
        self, msg_id: str, token: str, claims: ResolveClaims, decided: VerifiedDecision
    ) -> None:
        run, [call] = await self.ledger.run_and_calls(claims.run, [claims.call])
        if run is None:
            await self.refuse(claims.run, msg_id, "no such run", decided.person)
            return
        roles = resolver_roles(self.rt, run, call) if call is not None else frozenset()
        reason = refusal(call, claims, decided, roles)
        if reason is not None:
            await self.refuse(claims.run, msg_id, reason, decided.person)
            return
        assert call is not None
        decider = Decider(decided.person, decided.signer, token, claims.jti)
        turn_calls = await self.ledger.turn_calls(call.run_id, call.turn)
        if claims.outcome == "recheck":
            tx = self.ledger.recheck_call(call, turn_calls, decider=decider, msg_id=msg_id)
        else:
            tx = self.ledger.resolve_call(
                call,
                turn_calls,
                applied=claims.outcome == "applied",
                result=claims.result,
                decider=decider,
                msg_id=msg_id,
            )
        if (await self.ledger.apply(tx)).ok:
            log.info(
                "call resolved",
                extra=log_fields(
                    run_id=call.run_id,
                    call_id=call.call_id,
                    outcome=claims.outcome,
                    person=decided.person,
                ),
            )
            return
        await self.refuse(
            claims.run, msg_id, "already resolved, or this decision was applied", decided.person
        )
