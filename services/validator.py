"""validator worker: decides every call of a turn before anything runs (DESIGN §1, §6, §7).

The model only proposes.  For each call of the batch the policy checks allow-list, size,
depth, schema, identity scope and preconditions; the verdicts, the run's next state, the
exec messages for allowed calls and the results of rejected ones are written in one atomic
step, so a redelivered batch is a no-op.  Calls that need a human get an approval record
bound to their exact arguments; the run pauses, and by default nothing with an effect runs
until the whole batch is decided.  Decisions arrive on the approvals stream (`approval_flow`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from services.approval_flow import ApprovalFlow
from shared.approvals import ApprovalRecord
from shared.dispatch import Decided, dispatch
from shared.envelopes import (
    ApprovalDecision,
    ApprovalExpired,
    Envelope,
    ReadOrder,
    ValidateRequest,
    new_id,
)
from shared.errors import EnvelopeError, NotFoundError
from shared.expiry import ApprovalExpiryScheduler
from shared.policy import Decision, Limits, ProposedCall, check_preconditions, decide_batch
from shared.records import CallRecord, RunRecord, error_result
from shared.service import Runtime, ServiceSpec, fail_run_for_dead_letter, main
from shared.states import CallState, RunState
from shared.store import now_ms, require_calls
from shared.streams import Delivery, Handler
from shared.tools import Effect, call_context, load_registry
from shared.tx import Tx

log = logging.getLogger("callgate.validator")

_TARGET = {
    "allowed": CallState.ALLOWED,
    "rejected": CallState.REJECTED,
    "needs_approval": CallState.NEEDS_APPROVAL,
}


class Validator:
    def __init__(self, runtime: Runtime, session: aiohttp.ClientSession) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = session
        self.limits = Limits.from_settings(runtime.settings)
        self.expiry = ApprovalExpiryScheduler(runtime.settings)
        self.approvals = ApprovalFlow(runtime)

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case ValidateRequest():
                await self.on_validate(message, delivery)
            case ApprovalDecision() | ApprovalExpired():
                await self.approvals.on_message(message)
            case _:
                raise EnvelopeError(f"validator does not handle {message.kind!r}")

    async def on_validate(self, message: ValidateRequest, delivery: Delivery) -> None:
        run, found = await self.ledger.run_and_calls(message.run_id, message.call_ids)
        if run is None:
            raise NotFoundError(f"run {message.run_id} does not exist")
        if run.status != RunState.VALIDATING or run.turn != message.turn:
            return  # decided already (redelivery) or the run moved on
        calls = require_calls(run.run_id, message.call_ids, found)
        if any(call.state != CallState.REQUESTED for call in calls):
            return
        decisions = await self._decide(run, calls)
        tx = Tx()
        decided: list[Decided] = []
        approvals: list[ApprovalRecord] = []
        for call, decision in zip(calls, decisions, strict=True):
            approval = self._approval(run, call, decision)
            self._record_decision(tx, run, call, decision, approval)
            if approval is not None:
                approvals.append(approval)
            decided.append(_decided(run, call, decision))
        hold = bool(approvals) and run.batch_policy == "hold_effects"
        to_state = RunState.PAUSED_APPROVAL if approvals else RunState.EXECUTING
        self.ledger.run_transition(
            tx,
            run.run_id,
            [RunState.VALIDATING],
            to_state,
            expect_turn=run.turn,
            fields={"reason": "awaiting approval"} if approvals else None,
        )
        dispatch(self.ledger, tx, run.run_id, run.turn, decided, writes=not hold)
        if not approvals:  # else scheduling their expiry follows the step
            delivery.ack_with(tx)
        if (await self.ledger.apply(tx)).ok:
            for approval in approvals:
                await self.expiry.schedule(approval)

    async def _decide(self, run: RunRecord, calls: Sequence[CallRecord]) -> list[Decision]:
        registry = load_registry(run.tool_modules)
        allowed = run.allowed_tools if run.allowed_tools is not None else registry.names()
        decisions = decide_batch(
            registry,
            allowed_tools=allowed,
            identity=run.identity,
            calls=[ProposedCall(c.call_id, c.tool, c.raw_arguments) for c in calls],
            limits=self.limits,
        )
        checked: list[Decision] = []
        for call, decision in zip(calls, decisions, strict=True):
            if decision.tool is not None and decision.arguments is not None:
                ctx = call_context(run, call, self.session)
                error = await check_preconditions(decision.tool, ctx, decision.arguments)
                if error is not None:
                    decision = decision.reject(error)
            checked.append(decision)
        return checked

    def _approval(self, run: RunRecord, call: CallRecord, d: Decision) -> ApprovalRecord | None:
        if d.outcome != "needs_approval" or d.tool is None:
            return None
        ttl_s = run.approval_ttl_s or self.rt.settings.approval_ttl_s
        return ApprovalRecord(
            approval_id=f"apr_{new_id()}",
            run_id=run.run_id,
            turn=run.turn,
            call_id=call.call_id,
            tool=d.tool.name,
            tool_version=d.tool.version,
            args_hash=d.args_hash or "",
            arguments=d.canonical_arguments or "{}",
            requested_by=str(run.identity.get("user", "")),
            approver_role=d.approver_role or "",
            expires_ms=now_ms() + int(ttl_s * 1000),
        )

    def _record_decision(
        self,
        tx: Tx,
        run: RunRecord,
        call: CallRecord,
        d: Decision,
        approval: ApprovalRecord | None,
    ) -> None:
        fields: dict[str, Any] = {"decision": d.outcome}
        sensitive: frozenset[str] = frozenset()
        if d.arguments is not None:
            fields.update(arguments=d.arguments, args_hash=d.args_hash)
        if d.tool is not None:
            sensitive = d.tool.sensitive_fields
            fields.update(tool_version=d.tool.version, effect=d.tool.effect.value)
            resource = _resource(d)
            if resource is not None:
                fields["resource_key"] = resource
            if d.tool.is_write:
                # Minted once, stored before any execution: the idempotency key downstream.
                fields["operation_id"] = f"op_{new_id()}{new_id()}"
        if d.error is not None:
            fields.update(
                reason=d.error["message"],
                result=error_result(d.error["code"], d.error["message"]),
            )
        if approval is not None:
            fields["approval_id"] = approval.approval_id
            self._request_approval(tx, approval, d)
        self.ledger.call_transition(
            tx,
            run.run_id,
            call.call_id,
            [CallState.REQUESTED],
            _TARGET[d.outcome],
            fields=fields,
            sensitive=sensitive,
        )

    def _request_approval(self, tx: Tx, approval: ApprovalRecord, d: Decision) -> None:
        keys = self.rt.keys
        key = keys.approval(approval.run_id, approval.approval_id)
        tx.expect_missing(key).hset(key, approval.to_hash())
        tx.zadd(
            keys.run_pending_approvals(approval.run_id),
            {f"{approval.run_id} {approval.approval_id}": approval.expires_ms},
        )
        shown = d.tool.redact(d.arguments) if d.tool is not None else {}
        notice: dict[str, object] = {
            "approval_id": approval.approval_id,
            "call_id": approval.call_id,
            "tool": approval.tool,
            "args_hash": approval.args_hash,
            "approver_role": approval.approver_role,
            "expires_ms": approval.expires_ms,
            "requested_by": approval.requested_by,
            "arguments": shown,
        }
        self.ledger.event(tx, approval.run_id, "approval.requested", **notice)  # type: ignore[arg-type]
        tx.xadd(
            keys.run_stream("notify", approval.run_id),
            {
                "d": orjson.dumps(
                    {"type": "approval_requested", "run_id": approval.run_id, **notice}
                )
            },
        )


def _resource(d: Decision) -> str | None:
    """The resource a write orders on; a read has none, so its arguments are not parsed again."""
    if d.tool is None or not d.tool.is_write:
        return None
    return d.tool.resource_of(d.tool.validate(d.arguments or {}))


def _decided(run: RunRecord, call: CallRecord, d: Decision) -> Decided:
    read = None
    if d.outcome == "allowed" and d.tool is not None and d.tool.effect is Effect.READ:
        read = ReadOrder(
            tool=d.tool.name,
            tool_version=d.tool.version,
            tool_modules=tuple(run.tool_modules),
            arguments=dict(d.arguments or {}),
            identity=dict(run.identity),
        )
    return Decided(
        call.call_id,
        call.index,
        _TARGET[d.outcome],
        is_write=d.tool is not None and d.tool.is_write,
        resource_key=_resource(d),
        read=read,
    )


async def _make_handler(runtime: Runtime) -> Handler:
    session = aiohttp.ClientSession()
    validator = Validator(runtime, session)
    runtime.closers += [session.close, validator.expiry.close]
    return validator.handle


SPEC = ServiceSpec("validator", ("validate", "approvals"), _make_handler, fail_run_for_dead_letter)

if __name__ == "__main__":
    main(SPEC)
