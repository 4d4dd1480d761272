"""executor worker: runs allowed and approved calls, each exactly once per decision.

Taking a write is a compare-and-set (``allowed|approved → executing``, attempt n → n+1), so a
redelivered message never starts a second execution while the first is alive.  A message
redelivered because its executor died finds the call still ``executing``: an idempotent
write is retried with the same operation id, and a write becomes ``unknown`` and goes to the
reconciler — never replayed (DESIGN §8).  A read is safe to redo, so it is not taken first:
it runs, then ``allowed → executing → outcome`` is one guarded step (a racing duplicate's
step finds the call settled and writes nothing).  A lost answer (timeout, dropped
connection) fails a read with an explicit error and makes any write ``unknown``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from callgate.crashpoints import crash_point
from callgate.envelopes import CallResult, Envelope, ExecRequest, ReadOrder, ReconcileRequest
from callgate.errors import EnvelopeError, NotFoundError, ToolError
from callgate.keys import Keys
from callgate.ledger.steps import expect_recorded
from callgate.ledger.tx import Tx
from callgate.logs import log_fields
from callgate.records import CallRecord, RunRecord, error_result, ok_result
from callgate.states import CallState
from callgate.streams.service import Runtime, ServiceSpec, fail_run_for_dead_letter, main
from callgate.streams.worker import Delivery, Handler
from callgate.tools.contract import (
    Effect,
    Tool,
    ToolContext,
    call_context,
    context_of,
    load_registry,
)

log = logging.getLogger("callgate.executor")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one execution ended: a terminal state with its result, or ``unknown``."""

    state: CallState
    result: dict[str, Any] | None


class Executor:
    def __init__(self, runtime: Runtime, session: aiohttp.ClientSession) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = session

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case ExecRequest():
                await self.on_exec(message, delivery)
            case _:
                raise EnvelopeError(f"executor does not handle {message.kind!r}")

    async def on_exec(self, message: ExecRequest, delivery: Delivery) -> None:
        if message.read is not None:
            tool = _ordered_tool(message.read)
            if tool is not None:
                read = _Read.ordered(message, message.read)
                if await self._read(read, tool, message.chain, delivery):
                    return
                log.warning(
                    "read order does not match the ledger; running it from the ledger",
                    extra=log_fields(run_id=message.run_id, call_id=message.call_id),
                )
        run, [call] = await self.ledger.run_and_calls(message.run_id, [message.call_id])
        if call is None or run is None:
            raise NotFoundError(f"call {message.run_id}/{message.call_id} does not exist")
        tool = load_registry(run.tool_modules).get(call.tool)
        if tool is None:
            raise NotFoundError(f"tool {call.tool!r} is not registered")
        if call.state == CallState.EXECUTING and tool.effect is Effect.WRITE:
            await self._orphaned_write(call, message, delivery)
            return
        if call.state not in (CallState.ALLOWED, CallState.APPROVED, CallState.EXECUTING):
            return  # done already: its outcome and the next message were written together
        attempt = call.attempts + 1
        if tool.effect is Effect.READ and call.approval_id is None:
            await self._read(_Read.recorded(run, call), tool, message.chain, delivery)
            return
        if not await self._take(call, attempt):
            return
        crash_point("executor.after_take")
        broken = await self._approval_binding_error(call, tool)
        if broken is not None:
            outcome = Outcome(CallState.FAILED, error_result("approval_mismatch", broken))
        else:
            ctx = call_context(run, call, self.session, attempt)
            op_id = call.operation_id or call.call_id
            outcome = await self._execute(ctx, tool, call.arguments or {}, op_id)
        crash_point("executor.after_request")
        await self._record(call, attempt, outcome, message.chain, tool.sensitive_fields, delivery)
        crash_point("executor.after_persist")

    async def _read(
        self, read: _Read, tool: Tool[Any], chain: tuple[str, ...], delivery: Delivery
    ) -> bool:
        """A read runs first and is taken and settled in one step: redoing it is harmless,
        so a separate durable take would only cost a round trip on every tool call.

        A read from its order is settled only if the ledger holds what the order says the
        validator decided (tool, version, arguments, the run's identity and modules); False
        if it does not, and nothing is written."""
        tx = Tx()
        if read.order is not None:
            try:
                _bind(tx, self.rt.keys, read, read.order)
            except ValueError:  # values no record could hold: not what the validator wrote
                return False
        crash_point("executor.after_take")
        attempt = read.attempts + 1
        ctx = context_of(read.run_id, read.call_id, read.turn, read.identity, self.session, attempt)
        outcome = await self._execute(ctx, tool, read.arguments, read.call_id)
        crash_point("executor.after_request")
        fields: dict[str, Any] = {} if outcome.result is None else {"result": outcome.result}
        self.ledger.call_run_through(
            tx,
            read.run_id,
            read.call_id,
            read.state,
            outcome.state,
            attempts=read.attempts,
            taken=self._taken(attempt),
            fields=fields,
            sensitive=tool.sensitive_fields,
        )
        self._report(
            tx, read.run_id, read.turn, read.call_id, outcome, chain, tool.sensitive_fields
        )
        result = await asyncio.shield(self.ledger.apply(delivery.ack_with(tx)))
        crash_point("executor.after_persist")
        return result.failed is None or result.failed.field not in READ_ORDER_FIELDS

    def _taken(self, attempt: int) -> dict[str, Any]:
        return {"attempts": attempt, "executor": self.rt.consumer}

    async def _take(self, call: CallRecord, attempt: int) -> bool:
        """allowed|approved → executing, or re-take an orphaned read (attempt n → n+1)."""
        tx = Tx()
        if call.state == CallState.EXECUTING:
            tx.expect(self.rt.keys.call(call.run_id, call.call_id), "attempts", str(call.attempts))
        self.ledger.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [call.state],
            CallState.EXECUTING,
            fields=self._taken(attempt),
        )
        result = await self.ledger.apply(tx)
        return result.ok

    async def _approval_binding_error(self, call: CallRecord, tool: Tool[Any]) -> str | None:
        """Re-check, just before dispatch, that the approval still binds this exact call."""
        if call.approval_id is None:
            return None
        approval = await self.ledger.get_approval(call.run_id, call.approval_id)
        if approval is None:
            return "the approval record is missing"
        if approval.state != "approved":
            return f"the approval is {approval.state}, not approved"
        if approval.args_hash != call.args_hash or approval.call_id != call.call_id:
            return "the arguments differ from the approved ones"
        if approval.tool_version != tool.version:
            return f"the tool changed from version {approval.tool_version} to {tool.version}"
        return None

    async def _execute(
        self, ctx: ToolContext, tool: Tool[Any], arguments: dict[str, Any], operation_id: str
    ) -> Outcome:
        args = tool.validate(arguments)
        started = time.perf_counter()
        try:
            # A timeout scope, not wait_for: on Python 3.11 that wraps every call in a task.
            async with asyncio.timeout(tool.timeout_s):
                payload = await tool.execute(ctx, args, operation_id)
            return Outcome(CallState.SUCCEEDED, ok_result(payload))
        except ToolError as exc:
            return Outcome(CallState.FAILED, error_result(exc.code, exc.message))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if tool.is_write:
                # The effect may have happened: reconcile; never tell the model "error", which
                # invites it to ask again under a new operation id.
                return Outcome(CallState.UNKNOWN, None)
            code = "timeout" if isinstance(exc, TimeoutError) else "unavailable"
            message = (
                f"{tool.name} is unavailable: no answer within {tool.timeout_s:g} s"
                if code == "timeout"
                else f"{tool.name} is unavailable: {type(exc).__name__}"
            )
            return Outcome(CallState.FAILED, error_result(code, message))
        finally:
            # Debug: one line per call was a sixth of a busy executor's CPU (a write per line),
            # and the run's event log already has every call's start and outcome, timed.
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

    async def _record(
        self,
        call: CallRecord,
        attempt: int,
        outcome: Outcome,
        chain: tuple[str, ...],
        sensitive: frozenset[str],
        delivery: Delivery,
    ) -> None:
        """The outcome, its message and the next call of the chain, in one atomic step.

        A result may echo fields the tool marks sensitive; they never reach the event."""
        keys = self.rt.keys
        tx = Tx()
        tx.expect(keys.call(call.run_id, call.call_id), "attempts", str(attempt))
        fields: dict[str, Any] = {}
        if outcome.result is not None:
            fields["result"] = outcome.result
        self.ledger.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.EXECUTING],
            outcome.state,
            fields=fields,
            sensitive=sensitive,
        )
        if outcome.state == CallState.UNKNOWN:
            self.ledger.outbox(
                tx,
                keys.run_stream("reconcile", call.run_id),
                ReconcileRequest(
                    run_id=call.run_id, turn=call.turn, call_id=call.call_id, chain=chain
                ),
            )
        else:
            self._report(tx, call.run_id, call.turn, call.call_id, outcome, chain, sensitive)
        await asyncio.shield(self.ledger.apply(delivery.ack_with(tx)))

    def _report(
        self,
        tx: Tx,
        run_id: str,
        turn: int,
        call_id: str,
        outcome: Outcome,
        chain: tuple[str, ...],
        sensitive: frozenset[str],
    ) -> None:
        """The result message (with the result, unless the tool marks a field sensitive: a
        result may echo it, and such a value stays in the ledger) and the chain's next call."""
        keys = self.rt.keys
        self.ledger.outbox(
            tx,
            keys.run_stream("results", run_id),
            CallResult(
                run_id=run_id,
                turn=turn,
                call_id=call_id,
                state=outcome.state.value,
                result=None if sensitive else outcome.result,
            ),
        )
        if chain:
            self.ledger.outbox(
                tx,
                keys.run_stream("exec", run_id),
                ExecRequest(run_id=run_id, turn=turn, call_id=chain[0], chain=chain[1:]),
            )

    async def _orphaned_write(
        self, call: CallRecord, message: ExecRequest, delivery: Delivery
    ) -> None:
        """A write found ``executing`` after its executor died: its outcome is unknown."""
        tx = Tx()
        tx.expect(self.rt.keys.call(call.run_id, call.call_id), "attempts", str(call.attempts))
        self.ledger.call_transition(
            tx,
            call.run_id,
            call.call_id,
            [CallState.EXECUTING],
            CallState.UNKNOWN,
            fields={"reason": "executor died while the write was in flight"},
        )
        self.ledger.outbox(
            tx,
            self.rt.keys.run_stream("reconcile", call.run_id),
            ReconcileRequest(
                run_id=call.run_id, turn=call.turn, call_id=call.call_id, chain=message.chain
            ),
        )
        await self.ledger.apply(delivery.ack_with(tx))


@dataclass(frozen=True, slots=True)
class _Read:
    """A read to run, from its exec message's `ReadOrder` or from the ledger's records."""

    run_id: str
    call_id: str
    turn: int
    state: CallState
    attempts: int
    arguments: dict[str, Any]
    identity: dict[str, Any]
    order: ReadOrder | None = None

    @classmethod
    def ordered(cls, message: ExecRequest, order: ReadOrder) -> _Read:
        return cls(
            message.run_id,
            message.call_id,
            message.turn,
            CallState.ALLOWED,
            0,
            order.arguments,
            order.identity,
            order,
        )

    @classmethod
    def recorded(cls, run: RunRecord, call: CallRecord) -> _Read:
        return cls(
            call.run_id,
            call.call_id,
            call.turn,
            call.state,
            call.attempts,
            call.arguments or {},
            run.identity,
        )


READ_CALL_FIELDS = ("tool", "tool_version", "arguments")
READ_RUN_FIELDS = ("identity", "tool_modules")
"""The call's and the run's fields a `ReadOrder` carries: what its step is guarded on."""
READ_ORDER_FIELDS = frozenset({*READ_CALL_FIELDS, *READ_RUN_FIELDS})


def _bind(tx: Tx, keys: Keys, read: _Read, order: ReadOrder) -> None:
    """Guard ``tx`` on the ledger holding what ``order`` says the validator decided."""
    call = {name: getattr(order, name) for name in READ_CALL_FIELDS}
    expect_recorded(tx, CallRecord, keys.call(read.run_id, read.call_id), call)
    run = {name: getattr(order, name) for name in READ_RUN_FIELDS}
    expect_recorded(tx, RunRecord, keys.run(read.run_id), run)


def _ordered_tool(order: ReadOrder) -> Tool[Any] | None:
    """The tool an order names if it is still that read here, else None (the ledger path
    then decides, e.g. after a deploy changed the tool)."""
    tool = load_registry(order.tool_modules).get(order.tool)
    if tool is None or tool.version != order.tool_version or tool.effect is not Effect.READ:
        return None
    return tool


async def _make_handler(runtime: Runtime) -> Handler:
    session = aiohttp.ClientSession()
    runtime.closers.append(session.close)
    return Executor(runtime, session).handle


SPEC = ServiceSpec("executor", ("exec",), _make_handler, fail_run_for_dead_letter)

if __name__ == "__main__":
    main(SPEC)
