"""validator worker: decides every call of a turn before anything runs (README: Security).

The model only proposes.  For each call of the batch the policy checks allow-list, size,
depth, schema, identity scope and preconditions; the verdicts, the run's next state, the
exec messages for allowed calls and the results of rejected ones are written in one atomic
step, so a redelivered batch is a no-op.  It decides from the turn's facts
(`callgate.facts.DecideFacts`: the run's authority and the calls as recorded), carried by the
message or read from the ledger; a tool's preconditions (which may do I/O) run only after a
guarded check that the ledger holds those facts, and carried facts that make deciding raise
are set aside for the ledger's.  Calls that need a human get an approval bound to their exact
arguments; the run pauses, and by default nothing with an effect runs until the whole batch
is decided.  Signed decisions arrive on the decisions stream
(`callgate.decisions.flow`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from callgate.clock import now_ms
from callgate.decisions.expiry import ApprovalExpiryScheduler
from callgate.decisions.flow import ApprovalFlow
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import ApprovalExpired, Envelope, SignedDecision, ValidateRequest, new_id
from callgate.errors import EnvelopeError
from callgate.facts import (
    MISMATCH,
    DecideFacts,
    ExecCallFacts,
    ExecFacts,
    ExecRunFacts,
    Mismatch,
    distrusted,
)
from callgate.facts import ProposedCall as RecordedCall
from callgate.facts import decide as decide_with
from callgate.ledger.call_steps import Verdict
from callgate.ledger.dispatch import Decided
from callgate.logs import log_fields
from callgate.records import RAW_ARGUMENTS_MAX_BYTES, ErrorResult, truncate_utf8
from callgate.states import CallState
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, fails_bound_run, main
from callgate.telemetry import spans
from callgate.tools.contract import context_of
from callgate.tools.policy import Decision, Limits, ProposedCall, check_preconditions, decide_batch

log = logging.getLogger("callgate.validator")

_TARGET = {
    "allowed": CallState.ALLOWED,
    "rejected": CallState.REJECTED,
    "needs_approval": CallState.NEEDS_APPROVAL,
}


class Validator:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = runtime.tool_session()
        self.limits = Limits.from_settings(runtime.settings)
        self.expiry = ApprovalExpiryScheduler(runtime.settings)
        self.approvals = ApprovalFlow(runtime)

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case ValidateRequest():
                carried = self._carried(message)
                await decide_with(
                    carried,
                    lambda: self.ledger.decide_facts(
                        message.run_id, message.turn, message.call_ids
                    ),
                    lambda facts: self._decide_on(message, facts, delivery, facts is carried),
                    {"run_id": message.run_id, "turn": message.turn},
                )
            case SignedDecision():
                await self.approvals.on_decision(message)
            case ApprovalExpired():
                await self.approvals.on_expiry(message)
            case _:
                raise EnvelopeError(f"validator does not handle {message.kind!r}")

    def _carried(self, message: ValidateRequest) -> DecideFacts | None:
        facts = message.facts
        if facts is None or not self.rt.settings.carry:
            return None
        if tuple(c.call_id for c in facts.calls) != message.call_ids or any(
            truncate_utf8(c.raw_arguments, RAW_ARGUMENTS_MAX_BYTES) != c.raw_arguments
            for c in facts.calls
        ):
            # No record could hold these (a record keeps the first bytes of the arguments,
            # which a guard on it would match): not what model_turn wrote.
            distrusted({"run_id": message.run_id, "turn": message.turn})
            return None
        return facts

    async def _decide_on(
        self, message: ValidateRequest, facts: DecideFacts, delivery: Delivery, carried: bool
    ) -> Mismatch | None:
        """Decide on ``facts``.  A message's own facts are only its word until the step's
        guard holds them: if deciding on them raises, they are set aside for the ledger's,
        whose errors are real ones (the message never fails its run for what it carried)."""
        if not carried:
            return await self._decide(message, facts, delivery)
        try:
            return await self._decide(message, facts, delivery)
        except Exception:
            log.warning(
                "deciding on carried facts raised",
                exc_info=True,
                extra=log_fields(run_id=message.run_id, turn=message.turn),
            )
            return MISMATCH

    async def _decide(
        self, message: ValidateRequest, facts: DecideFacts, delivery: Delivery
    ) -> Mismatch | None:
        """Decide every call of the turn and write it all in one guarded step."""
        run_id, turn, started_ns = message.run_id, message.turn, time.time_ns()
        decisions = decide_batch(
            self.rt.registry,
            allowed_tools=facts.run.allowed_tools,
            identity=facts.run.identity,
            calls=[ProposedCall(c.call_id, c.tool, c.raw_arguments) for c in facts.calls],
            limits=self.limits,
        )
        if any(_has_preconditions(d) for d in decisions):
            check, binding = self.ledger.check_decide(run_id, turn, facts)
            held = await self.ledger.apply(check)
            if not held.ok:
                return MISMATCH if binding.broken(held) else None
            decisions = await self._preconditions(run_id, turn, facts, decisions)
        verdicts = [
            self._verdict(run_id, turn, facts, c, d)
            for c, d in zip(facts.calls, decisions, strict=True)
        ]
        tx, binding = self.ledger.decide_calls(run_id, turn, facts, verdicts)
        approvals = [v.approval for v in verdicts if v.approval is not None]
        if not approvals:  # else scheduling their expiry follows the step
            delivery.ack_with(tx)
        result = await self.ledger.apply(tx)
        if result.ok:
            for approval in approvals:
                await self.expiry.schedule(approval)
            if spans.enabled():
                spans.validated(
                    turn,
                    [
                        (c.tool, v.call_id, v.fields)
                        for c, v in zip(facts.calls, verdicts, strict=True)
                    ],
                    started_ns,
                )
        return MISMATCH if binding.broken(result) else None

    async def _preconditions(
        self, run_id: str, turn: int, facts: DecideFacts, decisions: Sequence[Decision]
    ) -> list[Decision]:
        checked: list[Decision] = []
        for call, decision in zip(facts.calls, decisions, strict=True):
            tool, arguments = decision.tool, decision.arguments
            if tool is not None and arguments is not None and tool.has_preconditions:
                ctx = context_of(run_id, call.call_id, turn, facts.run.identity, self.session)
                error = await check_preconditions(tool, ctx, arguments)
                if error is not None:
                    decision = decision.reject(error)
            checked.append(decision)
        return checked

    def _verdict(
        self, run_id: str, turn: int, facts: DecideFacts, call: RecordedCall, d: Decision
    ) -> Verdict:
        """What the ledger records for one call, and where it goes next."""
        approval = self._approval(run_id, turn, facts, call, d)
        fields = _decision_fields(d)
        if approval is not None:
            fields["approval_id"] = approval.approval_id
        tool = d.tool
        sensitive = frozenset() if tool is None else tool.sensitive_fields
        carried = d.outcome == "allowed" and not sensitive
        route = Decided(
            call.call_id,
            call.index,
            _TARGET[d.outcome],
            is_write=tool is not None and tool.is_write,
            resource_key=fields.get("resource_key"),
            facts=_exec_facts(facts, d, fields) if carried else None,
        )
        shown = None if tool is None or approval is None else tool.redact(d.arguments or {})
        return Verdict(call.call_id, _TARGET[d.outcome], fields, route, sensitive, approval, shown)

    def _approval(
        self, run_id: str, turn: int, facts: DecideFacts, call: RecordedCall, d: Decision
    ) -> ApprovalRecord | None:
        if d.outcome != "needs_approval" or d.tool is None:
            return None
        ttl_s = facts.run.approval_ttl_s or self.rt.settings.approval_ttl_s
        return ApprovalRecord(
            approval_id=f"apr_{new_id()}",
            run_id=run_id,
            turn=turn,
            call_id=call.call_id,
            tool=d.tool.name,
            tool_version=d.tool.version,
            args_hash=d.args_hash or "",
            arguments=d.canonical_arguments or "{}",
            requested_by=str(facts.run.identity.get("user", "")),
            approver_role=d.approver_role or "",
            requested_ms=(now := now_ms()),
            expires_ms=now + int(ttl_s * 1000),
        )


def _has_preconditions(d: Decision) -> bool:
    return d.tool is not None and d.arguments is not None and d.tool.has_preconditions


def _decision_fields(d: Decision) -> dict[str, Any]:
    """The call record's fields for this decision (the policy's verdict, made durable)."""
    fields: dict[str, Any] = {"decision": d.outcome}
    if d.arguments is not None:
        fields.update(arguments=d.arguments, args_hash=d.args_hash)
    tool = d.tool
    if tool is not None:
        fields.update(
            tool_version=tool.version, effect=tool.effect.value, effect_source=tool.effect_source
        )
        if tool.is_write:
            # The resource it orders on; a read has none, so its arguments are not parsed again.
            fields["resource_key"] = tool.resource_of(tool.validate(d.arguments or {}))
            # Minted once, stored before any execution: the idempotency key downstream.
            fields["operation_id"] = f"op_{new_id()}{new_id()}"
    if d.error is not None:
        fields.update(reason=d.error.message, result=ErrorResult(error=d.error))
    return fields


def _exec_facts(facts: DecideFacts, d: Decision, fields: dict[str, Any]) -> ExecFacts | None:
    """The facts an executor runs an allowed call on, exactly as this step records them."""
    tool = d.tool
    if tool is None or d.arguments is None:
        return None
    # Built from values this step has just checked and records: nothing to validate again.
    call = ExecCallFacts.model_construct(
        tool=tool.name,
        tool_version=tool.version,
        effect=tool.effect,
        arguments=d.arguments,
        args_hash=d.args_hash,
        operation_id=fields.get("operation_id"),
        approval_id=None,
    )
    run = ExecRunFacts.model_construct(identity=facts.run.identity)
    return ExecFacts.model_construct(run=run, call=call, state=CallState.ALLOWED, attempts=0)


async def _make_handler(runtime: Runtime) -> Handler:
    validator = Validator(runtime)
    runtime.closers.append(validator.expiry.close)
    return validator.handle


SPEC = ServiceSpec(
    "validator", ("validate", "decisions"), _make_handler, fails_bound_run(ValidateRequest)
)

if __name__ == "__main__":
    main(SPEC)
