"""validator worker: decides every call of a turn before anything runs (DESIGN §1, §6, §7).

The model only proposes.  For each call of the batch the policy checks allow-list, size,
depth, schema, identity scope and preconditions; the verdicts, the run's next state, the
exec messages for allowed calls and the results of rejected ones are written in one atomic
step, so a redelivered batch is a no-op.  It decides from the order model_turn wrote with
the call records (`DecideOrder`), guarded on the ledger still holding it, and reads the
ledger only when there is no order or it does not match.  Calls that need a human get an
approval record bound to their exact arguments; the run pauses, and by default nothing with
an effect runs until the whole batch is decided.  Decisions arrive on the approvals stream
(`approval_flow`).
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson

from callgate.approvals.expiry import ApprovalExpiryScheduler
from callgate.approvals.flow import ApprovalFlow
from callgate.approvals.record import ApprovalRecord
from callgate.envelopes import (
    ApprovalDecision,
    ApprovalExpired,
    DecideOrder,
    Envelope,
    ProposedOrder,
    ReadOrder,
    ValidateRequest,
    decide_order,
    new_id,
)
from callgate.errors import EnvelopeError, NotFoundError
from callgate.ledger.dispatch import Decided, dispatch
from callgate.ledger.steps import expect_recorded
from callgate.ledger.store import now_ms, require_calls
from callgate.ledger.tx import Tx
from callgate.logs import log_fields
from callgate.records import (
    RAW_ARGUMENTS_MAX_BYTES,
    CallRecord,
    RunRecord,
    error_result,
    truncate_utf8,
)
from callgate.states import CallState, RunState
from callgate.streams.service import Runtime, ServiceSpec, fail_run_for_dead_letter, main
from callgate.streams.worker import Delivery, Handler
from callgate.tools.contract import Effect, context_of, load_registry
from callgate.tools.policy import Decision, Limits, ProposedCall, check_preconditions, decide_batch

log = logging.getLogger("callgate.validator")

RUN_ORDER_FIELDS = ("identity", "tool_modules", "allowed_tools", "batch_policy", "approval_ttl_s")
CALL_ORDER_FIELDS = ("tool", "index", "raw_arguments")
"""The run's and each call's fields a `DecideOrder` carries: the fields the validator's
step is guarded on when it decides from one."""
ORDER_FIELDS = frozenset({*RUN_ORDER_FIELDS, *CALL_ORDER_FIELDS})

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
        order = message.order
        if order is not None and tuple(c.call_id for c in order.calls) == message.call_ids:
            if await self._decide_and_record(message, order, delivery):
                return
            log.warning(
                "validate order does not match the ledger; deciding from the ledger",
                extra=log_fields(run_id=message.run_id, turn=message.turn),
            )
        order = await self._ledger_order(message)
        if order is not None:
            await self._decide_and_record(message, order, delivery)

    async def _ledger_order(self, message: ValidateRequest) -> DecideOrder | None:
        """The turn's order as the ledger holds it; None if it was decided already
        (redelivery) or the run moved on."""
        run, found = await self.ledger.run_and_calls(message.run_id, message.call_ids)
        if run is None:
            raise NotFoundError(f"run {message.run_id} does not exist")
        if run.status != RunState.VALIDATING or run.turn != message.turn:
            return None
        calls = require_calls(run.run_id, message.call_ids, found)
        if any(call.state != CallState.REQUESTED for call in calls):
            return None
        return decide_order(run, calls)

    async def _decide_and_record(
        self, message: ValidateRequest, order: DecideOrder, delivery: Delivery
    ) -> bool:
        """Decide every call of ``order`` and write it all in one step, guarded on the run
        still validating this turn and on the order matching the ledger; False if it did
        not match."""
        run_id, turn = message.run_id, message.turn
        try:
            tx = self._bound_to(Tx(), run_id, order)
        except ValueError:  # values no record could hold: not what model_turn wrote
            return False
        decisions = await self._decide(run_id, turn, order)
        decided: list[Decided] = []
        approvals: list[ApprovalRecord] = []
        for call, decision in zip(order.calls, decisions, strict=True):
            approval = self._approval(run_id, turn, order, call, decision)
            self._record_decision(tx, run_id, call, decision, approval)
            if approval is not None:
                approvals.append(approval)
            decided.append(_decided(order, call, decision))
        hold = bool(approvals) and order.batch_policy == "hold_effects"
        to_state = RunState.PAUSED_APPROVAL if approvals else RunState.EXECUTING
        self.ledger.run_transition(
            tx,
            run_id,
            [RunState.VALIDATING],
            to_state,
            expect_turn=turn,
            fields={"reason": "awaiting approval"} if approvals else None,
        )
        dispatch(self.ledger, tx, run_id, turn, decided, writes=not hold)
        if not approvals:  # else scheduling their expiry follows the step
            delivery.ack_with(tx)
        result = await self.ledger.apply(tx)
        if result.ok:
            for approval in approvals:
                await self.expiry.schedule(approval)
        return result.failed is None or result.failed.field not in ORDER_FIELDS

    def _bound_to(self, tx: Tx, run_id: str, order: DecideOrder) -> Tx:
        """Guard ``tx`` on the ledger holding exactly what ``order`` says was recorded."""
        run = {name: getattr(order, name) for name in RUN_ORDER_FIELDS}
        expect_recorded(tx, RunRecord, self.rt.keys.run(run_id), run)
        for call in order.calls:
            if truncate_utf8(call.raw_arguments, RAW_ARGUMENTS_MAX_BYTES) != call.raw_arguments:
                raise ValueError("raw arguments longer than a call record keeps")
            recorded = {name: getattr(call, name) for name in CALL_ORDER_FIELDS}
            expect_recorded(tx, CallRecord, self.rt.keys.call(run_id, call.call_id), recorded)
        return tx

    async def _decide(self, run_id: str, turn: int, order: DecideOrder) -> list[Decision]:
        registry = load_registry(list(order.tool_modules))
        allowed = order.allowed_tools if order.allowed_tools is not None else registry.names()
        decisions = decide_batch(
            registry,
            allowed_tools=allowed,
            identity=order.identity,
            calls=[ProposedCall(c.call_id, c.tool, c.raw_arguments) for c in order.calls],
            limits=self.limits,
        )
        checked: list[Decision] = []
        for call, decision in zip(order.calls, decisions, strict=True):
            if decision.tool is not None and decision.arguments is not None:
                ctx = context_of(run_id, call.call_id, turn, order.identity, self.session)
                error = await check_preconditions(decision.tool, ctx, decision.arguments)
                if error is not None:
                    decision = decision.reject(error)
            checked.append(decision)
        return checked

    def _approval(
        self, run_id: str, turn: int, order: DecideOrder, call: ProposedOrder, d: Decision
    ) -> ApprovalRecord | None:
        if d.outcome != "needs_approval" or d.tool is None:
            return None
        ttl_s = order.approval_ttl_s or self.rt.settings.approval_ttl_s
        return ApprovalRecord(
            approval_id=f"apr_{new_id()}",
            run_id=run_id,
            turn=turn,
            call_id=call.call_id,
            tool=d.tool.name,
            tool_version=d.tool.version,
            args_hash=d.args_hash or "",
            arguments=d.canonical_arguments or "{}",
            requested_by=str(order.identity.get("user", "")),
            approver_role=d.approver_role or "",
            expires_ms=now_ms() + int(ttl_s * 1000),
        )

    def _record_decision(
        self,
        tx: Tx,
        run_id: str,
        call: ProposedOrder,
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
            run_id,
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


def _decided(order: DecideOrder, call: ProposedOrder, d: Decision) -> Decided:
    """``read`` is set for an allowed read whose tool marks no argument sensitive: such a
    value is kept in the ledger's records only, never in a message."""
    read = None
    tool = d.tool
    if (
        d.outcome == "allowed"
        and tool is not None
        and tool.effect is Effect.READ
        and not tool.sensitive_fields
    ):
        read = ReadOrder(
            tool=tool.name,
            tool_version=tool.version,
            tool_modules=order.tool_modules,
            arguments=dict(d.arguments or {}),
            identity=dict(order.identity),
        )
    return Decided(
        call.call_id,
        call.index,
        _TARGET[d.outcome],
        is_write=tool is not None and tool.is_write,
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
