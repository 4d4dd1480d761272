"""executor worker: runs allowed and approved calls, each exactly once per decision.

It decides from the call's facts (`callgate.facts.ExecFacts`: who it runs for, the tool, its
version and arguments), carried by the exec message or read from the ledger.  Taking a write
is a compare-and-set (``allowed|approved → executing``, attempt n → n+1), so a redelivered
message never starts a second execution while the first is alive.  A message redelivered
because its executor died finds the call still ``executing``: an idempotent write is retried
with the same operation id, and a write becomes ``unknown`` and goes to the reconciler —
never replayed (DESIGN §8).  A read is safe to redo, so it runs first and is taken and
settled in one step.  A lost answer (timeout, dropped connection) fails a read with an
explicit error and makes any write ``unknown``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp

from callgate.crashpoints import crash_point
from callgate.envelopes import Envelope, ExecRequest
from callgate.errors import EnvelopeError, NotFoundError, ToolError
from callgate.facts import MISMATCH, ExecFacts, Mismatch, decide
from callgate.ledger.steps import Outcome
from callgate.logs import log_fields
from callgate.records import Effect, error_result, ok_result
from callgate.states import CallState
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, fail_run_for_dead_letter, main
from callgate.tools.contract import Tool, ToolContext, context_of

log = logging.getLogger("callgate.executor")

RUNNABLE = frozenset({CallState.ALLOWED, CallState.APPROVED, CallState.EXECUTING})


class Executor:
    def __init__(self, runtime: Runtime, session: aiohttp.ClientSession) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = session

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
        if facts.state == CallState.EXECUTING and tool.effect is Effect.WRITE:
            tx = self.ledger.orphaned_write(message, facts.attempts, message.chain)
            await self.ledger.apply(delivery.ack_with(tx))
            return None
        if tool.effect is Effect.READ and facts.call.approval_id is None:
            return await self._read(message, facts, tool, delivery)
        return await self._take_and_run(message, facts, tool, delivery)

    async def _read(
        self, message: ExecRequest, facts: ExecFacts, tool: Tool[Any], delivery: Delivery
    ) -> Mismatch | None:
        """Run, then take and settle in one step guarded on the facts it ran on."""
        crash_point("executor.after_take")
        attempt = facts.attempts + 1
        outcome = await self._execute(self._context(message, facts, attempt), tool, facts,
                                      message.call_id)
        crash_point("executor.after_request")
        tx, binding = self.ledger.read_through(
            message, facts, attempt, self.rt.consumer, outcome, message.chain,
            tool.sensitive_fields,
        )
        result = await asyncio.shield(self.ledger.apply(delivery.ack_with(tx)))
        crash_point("executor.after_persist")
        return MISMATCH if binding.broken(result) else None

    async def _take_and_run(
        self, message: ExecRequest, facts: ExecFacts, tool: Tool[Any], delivery: Delivery
    ) -> Mismatch | None:
        attempt = facts.attempts + 1
        tx, binding = self.ledger.take_call(
            message.run_id, message.call_id, facts, attempt, self.rt.consumer
        )
        taken = await self.ledger.apply(tx)
        if not taken.ok:
            return MISMATCH if binding.broken(taken) else None
        crash_point("executor.after_take")
        broken = await self._approval_binding_error(message, facts, tool)
        if broken is not None:
            outcome = Outcome(CallState.FAILED, error_result("approval_mismatch", broken))
        else:
            op_id = facts.call.operation_id or message.call_id
            outcome = await self._execute(self._context(message, facts, attempt), tool, facts,
                                          op_id)
        crash_point("executor.after_request")
        settle = self.ledger.settle_call(message, attempt, outcome, message.chain,
                                         tool.sensitive_fields)
        await asyncio.shield(self.ledger.apply(delivery.ack_with(settle)))
        crash_point("executor.after_persist")
        return None

    def _context(self, message: ExecRequest, facts: ExecFacts, attempt: int) -> ToolContext:
        return context_of(message.run_id, message.call_id, message.turn, facts.run.identity,
                          self.session, attempt)

    async def _approval_binding_error(
        self, message: ExecRequest, facts: ExecFacts, tool: Tool[Any]
    ) -> str | None:
        """Re-check, just before dispatch, that the approval still binds this exact call."""
        approval_id = facts.call.approval_id
        if approval_id is None:
            return None
        approval = await self.ledger.get_approval(message.run_id, approval_id)
        if approval is None:
            return "the approval record is missing"
        if approval.state != "approved":
            return f"the approval is {approval.state}, not approved"
        if approval.args_hash != facts.call.args_hash or approval.call_id != message.call_id:
            return "the arguments differ from the approved ones"
        if approval.tool_version != tool.version:
            return f"the tool changed from version {approval.tool_version} to {tool.version}"
        return None

    async def _execute(
        self, ctx: ToolContext, tool: Tool[Any], facts: ExecFacts, operation_id: str
    ) -> Outcome:
        args = tool.validate(facts.call.arguments)
        started = time.perf_counter()
        try:
            # A timeout scope, not wait_for: on Python 3.11 that wraps every call in a task.
            async with asyncio.timeout(tool.timeout_s):
                payload = await tool.execute(ctx, args, operation_id)
            return Outcome(CallState.SUCCEEDED, ok_result(payload))
        except ToolError as exc:
            return Outcome(CallState.FAILED, error_result(exc.code, exc.message))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return _lost_answer(tool, exc)
        finally:
            # Debug: the run's event log already has every call's start and outcome, timed.
            log.debug("executed", extra=log_fields(
                run_id=ctx.run_id, call_id=ctx.call_id, tool=tool.name, attempt=ctx.attempt,
                elapsed_ms=round((time.perf_counter() - started) * 1000, 1)))


def _lost_answer(tool: Tool[Any], exc: BaseException) -> Outcome:
    """No answer: a write may have happened (reconcile; never tell the model "error", which
    invites it to ask again under a new operation id); a read failed, explicitly."""
    if tool.is_write:
        return Outcome(CallState.UNKNOWN, None)
    if isinstance(exc, TimeoutError):
        message = f"{tool.name} is unavailable: no answer within {tool.timeout_s:g} s"
        return Outcome(CallState.FAILED, error_result("timeout", message))
    message = f"{tool.name} is unavailable: {type(exc).__name__}"
    return Outcome(CallState.FAILED, error_result("unavailable", message))


async def _make_handler(runtime: Runtime) -> Handler:
    session = aiohttp.ClientSession()
    runtime.closers.append(session.close)
    return Executor(runtime, session).handle


SPEC = ServiceSpec("executor", ("exec",), _make_handler, fail_run_for_dead_letter)

if __name__ == "__main__":
    main(SPEC)
