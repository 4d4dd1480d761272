"""executor worker: runs allowed and approved calls, each exactly once per decision.

It decides from the call's facts (`callgate.facts.ExecFacts`: who it runs for, the tool, its
version and arguments), carried by the exec message or read from the ledger, and takes the
call — a compare-and-set ``allowed|approved → executing`` guarded on those very facts —
before anything runs: a message whose facts the ledger does not hold runs nothing.  A
redelivered message never starts a second execution while the first is alive.  A message
redelivered because its executor died finds the call still ``executing``: a read is redone,
an idempotent write is retried with the same operation id, and a write becomes ``unknown`` and
goes to the reconciler — never replayed (reconciler.py).  Whether a call needs a human's
approval is asked again of the registered tool (its ``approval`` rule over the run's identity
and the arguments sent), never taken from the record, which the ``workers`` login can edit; such
a call runs only under an approval that verifies against exactly what is sent, and the take
consumes it (``approved → consumed``) in the same atomic step, so one approval sends one call
once.  A lost answer (timeout, dropped connection)
fails a read with an explicit error and makes any write ``unknown``; any other exception from a
tool fails a read with a ``tool_error`` result the model is told, and makes a write ``unknown``
with the (redacted) exception as its reason, for the reconciler.

With ``CALLGATE_WRITE_DURABILITY=replica`` the take of a write goes with a WAIT for a replica
on the same connection (`callgate.ledger.durable`), and its request goes out only once a
replica holds the ``executing`` intent; unconfirmed, nothing is sent (`Executor._unsent`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import aiohttp
from pydantic import BaseModel, ValidationError

from callgate.auth.tokens import verify_decision
from callgate.crashpoints import crash_point
from callgate.decisions.claims import read_approval_claims
from callgate.decisions.record import ApprovalRecord
from callgate.envelopes import Envelope, ExecRequest
from callgate.errors import (
    AuthError,
    EnvelopeError,
    NotFoundError,
    RedisUnavailableError,
    ToolError,
)
from callgate.facts import MISMATCH, ExecFacts, Mismatch, decide
from callgate.ledger.call_steps import Outcome
from callgate.ledger.durable import REPLICAS, check_durability
from callgate.logs import log_fields
from callgate.records import Effect, error_result, ok_result
from callgate.redact import redact_error, sensitive_values
from callgate.states import CallState
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, fail_bound_run, main
from callgate.streams.worker import DeadLetter
from callgate.telemetry import spans
from callgate.tools.canonical import args_hash
from callgate.tools.contract import Tool, ToolContext, context_of

log = logging.getLogger("callgate.executor")

RUNNABLE = frozenset({CallState.ALLOWED, CallState.APPROVED, CallState.EXECUTING})


class Executor:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = runtime.tool_session()

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case ExecRequest():
                await decide(
                    self._carried(message),
                    lambda: self.ledger.exec_facts(message.run_id, message.call_id),
                    lambda facts: self._run(message, facts, delivery),
                    {"run_id": message.run_id, "call_id": message.call_id},
                )
            case _:
                raise EnvelopeError(f"executor does not handle {message.kind!r}")

    def _carried(self, message: ExecRequest) -> ExecFacts | None:
        """The message's facts, if this deployment still has that tool at that version."""
        facts = message.facts
        if facts is None or not self.rt.settings.carry:
            return None
        tool = self.rt.registry.get(facts.call.tool)
        return facts if tool is not None and tool.version == facts.call.tool_version else None

    async def _run(
        self, message: ExecRequest, facts: ExecFacts, delivery: Delivery
    ) -> Mismatch | None:
        tool = self.rt.registry.get(facts.call.tool)
        if tool is None:
            raise NotFoundError(f"tool {facts.call.tool!r} is not registered")
        if facts.state not in RUNNABLE:
            return None  # done already: its outcome and the next message were written together
        if _left_in_flight(facts.state, tool):
            tx = self.ledger.orphaned_write(message, facts.attempts, message.chain)
            await self.ledger.apply(delivery.ack_with(tx))
            return None
        with spans.execute_tool(
            tool.name,
            message.call_id,
            origin=tool.origin,
            effect=tool.effect.value,
            effect_source=tool.effect_source,
            attempt=facts.attempts + 1,
            arguments=facts.call.arguments,
            sensitive=tool.sensitive_fields,
        ):
            return await self._take_and_run(message, facts, tool, delivery)

    async def _take_and_run(
        self, message: ExecRequest, facts: ExecFacts, tool: Tool[Any], delivery: Delivery
    ) -> Mismatch | None:
        attempt = facts.attempts + 1
        gate = await self._gate(message, facts, tool, attempt)
        consume = gate.consume if isinstance(gate, Cleared) else None
        tx, _ = self.ledger.take_call(
            message.run_id, message.call_id, facts, attempt, self.rt.consumer, consume
        )
        if isinstance(gate, Cleared) and tool.is_write and self.ledger.confirming is not None:
            taken, replicas = await self.ledger.apply_confirmed(tx)
        else:
            taken, replicas = await self.ledger.apply(tx), REPLICAS
        if not taken.ok:
            # Facts or state moved on: decide again from the ledger, which may show this very
            # call orphaned in ``executing`` by an attempt that lost Redis or its process.
            return MISMATCH
        if replicas < REPLICAS:
            await self._unsent(message, facts, attempt)
        crash_point("executor.after_take")
        if isinstance(gate, Cleared):
            op_id = facts.call.operation_id or message.call_id
            outcome = await self._execute(gate.ctx, tool, gate.sent, op_id)
        else:
            outcome = gate
        crash_point("executor.after_request")
        spans.note_outcome(outcome.state, outcome.result, tool.sensitive_fields)
        settle = self.ledger.settle_call(
            message, attempt, outcome, message.chain, tool.sensitive_fields
        )
        await asyncio.shield(self.ledger.apply(delivery.ack_with(settle)))
        crash_point("executor.after_persist")
        return None

    async def _unsent(self, message: ExecRequest, facts: ExecFacts, attempt: int) -> NoReturn:
        """No replica confirmed the write's intent in time, so it is not sent: a failover
        now could lose the record of a request that went out.  A first take is taken back
        (`untake_call`: nothing went out, and the record says so); a re-take of an
        idempotent write stays ``executing``, as its earlier attempt may have gone out and it
        is retried with its operation id either way; in a run cancelled meanwhile the call
        ends ``failed`` (not applied) instead.  The message stays pending, so it is
        redelivered after ``claim_idle_ms`` and waits for a replica again; a replica still
        missing after ``max_deliveries``, its dead letter fails the run with this reason."""
        run = await self.ledger.get_run(message.run_id)  # a cancel may have come since
        if facts.state != CallState.EXECUTING and run is not None:
            untake = self.ledger.untake_call(
                message.run_id, message.call_id, facts, attempt, self.rt.consumer, run.status
            )
            await self.ledger.apply(untake)
        wait_ms = self.rt.settings.durability_wait_ms
        raise RedisUnavailableError(
            f"no replica confirmed the executing intent of call {message.call_id} within "
            f"{wait_ms} ms: not sent, left for redelivery"
        )

    async def _gate(
        self, message: ExecRequest, facts: ExecFacts, tool: Tool[Any], attempt: int
    ) -> Cleared | Outcome:
        """What may go out, decided before the take from the registered tool, never from the
        record's say-so: the arguments as the tool validates them, its authorization, and —
        when its approval rule asks for one — a verified approval for the take to consume.
        Pure Python unless an approval is needed.  An `Outcome` is why nothing is sent."""
        try:
            ctx = self._context(message, facts, attempt)
            sent = tool.validate(facts.call.arguments)  # exactly what goes out
        except ValidationError as exc:
            return _refused(
                "invalid_arguments",
                f"the recorded call does not validate ({exc.error_count()} errors)",
            )
        role = tool.approval(ctx.identity, sent)  # the validator's question, asked again
        consume = facts.call.approval_id
        if role is not None or consume is not None:
            broken = await self._approval_error(message, facts, tool, sent, role)
            if broken is not None:
                return _refused("approval_mismatch", broken)
        reason = tool.authorize(ctx.identity, sent)
        if reason is not None:
            return _refused("not_authorized", reason)
        return Cleared(ctx, sent, consume)

    def _context(self, message: ExecRequest, facts: ExecFacts, attempt: int) -> ToolContext:
        return context_of(
            message.run_id, message.call_id, message.turn, facts.run.identity, self.session, attempt
        )

    async def _approval_error(
        self,
        message: ExecRequest,
        facts: ExecFacts,
        tool: Tool[Any],
        sent: BaseModel,
        role: str | None,
    ) -> str | None:
        """Why the call may not run under its approval: a signed approval must bind exactly
        what is sent (the hash of these very arguments, this call, this tool version), from a
        person who holds the role the tool asks for, decided before it expired, and not used
        yet — or used by this very call, which a redelivery finds still ``executing``."""
        approval_id = facts.call.approval_id
        if approval_id is None:
            return f"{tool.name} needs an approval by {role} and this call has none"
        approval = await self.ledger.get_approval(message.run_id, approval_id)
        if approval is None:
            return "the approval record is missing"
        spans.note_approval(approval.approval_id, approval.decided_ms, approval.requested_ms)
        usable = "consumed" if facts.state == CallState.EXECUTING else "approved"
        if approval.state == "consumed" and usable == "approved":
            return "the approval was used already: one approval sends its call once"
        if approval.state != usable:
            return f"the approval is {approval.state}, not {usable}"
        sent_hash = args_hash(tool.dump(sent))
        if sent_hash != approval.args_hash or approval.call_id != message.call_id:
            return "the arguments differ from the approved ones"
        if approval.tool_version != tool.version:
            return f"the tool changed from version {approval.tool_version} to {tool.version}"
        role = role or approval.approver_role
        if approval.approver_role != role:
            return f"the approval was asked of {approval.approver_role}, the tool needs {role}"
        if approval.decided_ms is None or approval.decided_ms >= approval.expires_ms:
            return "the approval was not decided before it expired"
        requester = str(facts.run.identity.get("user", ""))
        return self._signature_error(approval, message, sent_hash, requester)

    def _signature_error(
        self, approval: ApprovalRecord, call: ExecRequest, sent: str, requester: str
    ) -> str | None:
        if approval.decision_token is None:
            return "the approval carries no signed decision"
        try:
            decided = verify_decision(
                approval.decision_token,
                self.rt.trust.current(),
                now=(approval.decided_ms or 0) / 1000,
            )
            claims = read_approval_claims(decided.claims)
        except AuthError as exc:
            return f"the approval's decision does not verify: {exc.reason}"
        if (claims.act, claims.run, claims.apr, claims.call, claims.hash) != (
            "approve",
            call.run_id,
            approval.approval_id,
            call.call_id,
            sent,
        ):
            return "the signed decision does not approve these arguments"
        if approval.approver_role not in decided.roles:
            return f"{decided.person} does not hold the role {approval.approver_role}"
        if decided.person == requester:
            return "the requester cannot approve their own request"
        return None

    async def _execute(
        self, ctx: ToolContext, tool: Tool[Any], args: BaseModel, operation_id: str
    ) -> Outcome:
        started = time.perf_counter()
        try:
            # A timeout scope, not wait_for: on Python 3.11 that wraps every call in a task.
            async with asyncio.timeout(tool.timeout_s):
                payload = await tool.execute(ctx, args, operation_id)
            return Outcome(CallState.SUCCEEDED, ok_result(payload))
        except ToolError as exc:
            return Outcome(CallState.FAILED, error_result(exc.code, exc.message))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return _lost_answer(tool, exc, args)
        except Exception as exc:  # a bug or an unforeseen failure in the tool's own code
            return _tool_crashed(tool, exc, args)
        finally:
            # Debug: the run's event log already has every call's start and outcome, timed.
            log.debug(
                "executed",
                extra=log_fields(
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=tool.name,
                    attempt=ctx.attempt,
                    elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
                ),
            )


@dataclass(frozen=True, slots=True)
class Cleared:
    """A call that may go out: its context, the validated arguments, and the approval the
    take consumes (None when the tool asks for none)."""

    ctx: ToolContext
    sent: BaseModel
    consume: str | None = None


def _refused(code: str, why: str) -> Outcome:
    return Outcome(CallState.FAILED, error_result(code, why))


def _lost_answer(tool: Tool[Any], exc: BaseException, args: BaseModel) -> Outcome:
    """No answer: a write may have happened (reconcile; never tell the model "error", which
    invites it to ask again under a new operation id); a read failed, explicitly."""
    if tool.is_write:
        return Outcome(CallState.UNKNOWN, None, _why(tool, exc, args))
    if isinstance(exc, TimeoutError):
        message = f"{tool.name} is unavailable: no answer within {tool.timeout_s:g} s"
        return Outcome(CallState.FAILED, error_result("timeout", message))
    message = f"{tool.name} is unavailable: {type(exc).__name__}"
    return Outcome(CallState.FAILED, error_result("unavailable", message))


def _tool_crashed(tool: Tool[Any], exc: Exception, args: BaseModel) -> Outcome:
    """The tool raised something it does not declare.  A read's call fails with the exception
    as its result, so the model is told and the turn goes on (redelivering would only raise
    it again, then fail the whole run).  A write may have sent its request before raising:
    ``unknown``, with the exception on record, and the reconciler asks — never replayed."""
    log.warning("tool raised", extra=log_fields(tool=tool.name, error=type(exc).__name__))
    why = _why(tool, exc, args)
    if tool.is_write:
        return Outcome(CallState.UNKNOWN, None, why)
    return Outcome(CallState.FAILED, error_result("tool_error", why))


def _why(tool: Tool[Any], exc: BaseException, args: BaseModel) -> str:
    """The exception as the ledger keeps it: redacted, and without any value of an argument
    the tool marks sensitive (its message may quote one)."""
    return redact_error(exc, sensitive_values(tool.dump(args), tool.sensitive_fields))


async def _dead_letter(runtime: Runtime, letter: DeadLetter) -> None:
    """An exec order no delivery settled (its consumers kept dying).  A call it left
    ``executing`` still gets its one outcome: a write, which may have happened, goes to the
    reconciler as when a redelivery finds it orphaned (failing the run instead would strand it
    there, never settled); a read fails with the reason.  Any other dead exec order — and
    that read's — fails the run it is bound to (a cancelled or ended run stays as it is)."""
    order = letter.envelope
    if isinstance(order, ExecRequest):
        call = await runtime.ledger.get_call(order.run_id, order.call_id)
        tool = None if call is None else runtime.registry.get(call.tool)
        if (
            call is not None
            and tool is not None
            and call.turn == order.turn
            and (call.state == CallState.EXECUTING)
        ):
            if tool.is_write:
                tx = runtime.ledger.orphaned_write(order, call.attempts, order.chain)
                await runtime.ledger.apply(tx)
                return
            why = _refused("unavailable", f"{tool.name} was not settled: {letter.reason}")
            await runtime.ledger.apply(
                runtime.ledger.settle_call(
                    order, call.attempts, why, order.chain, tool.sensitive_fields
                )
            )
    await fail_bound_run(runtime, letter, (ExecRequest,))


def _left_in_flight(state: CallState, tool: Tool[Any] | None) -> bool:
    """A write found ``executing`` by anyone but its executor: that executor died with it in
    flight, so it may have gone out and only the reconciler may settle it (an idempotent
    write is retried with its operation id instead)."""
    return state == CallState.EXECUTING and tool is not None and tool.effect is Effect.WRITE


async def _make_handler(runtime: Runtime) -> Handler:
    """The executor's handler, once Redis gives the write durability the deployment asks
    (`DurabilityError` otherwise: the executor does not start)."""
    await check_durability(runtime.redis, runtime.settings)
    return Executor(runtime).handle


SPEC = ServiceSpec("executor", ("exec",), _make_handler, _dead_letter)

if __name__ == "__main__":
    main(SPEC)
