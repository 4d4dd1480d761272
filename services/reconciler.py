"""reconciler worker: settles writes whose outcome is unknown, without ever replaying them.

For a call in ``unknown`` it asks the authoritative system, through the tool's
``reconcile(operation_id)`` — or, for an idempotent write without one, by sending the same
request under the same operation id again — on a back-off schedule: one matching effect →
``succeeded`` with the confirmed result; none → ``failed`` ("not applied"); still unknown
after the last check → ``unresolved``: the run pauses (``paused_unknown_outcome``) and a human
is notified (README: Approvals and unknown outcomes).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from callgate.crashpoints import crash_point
from callgate.envelopes import Envelope, ReconcileRequest
from callgate.errors import EnvelopeError, NotFoundError, ToolError
from callgate.ledger.call_steps import Outcome
from callgate.ledger.store import Ledger
from callgate.logs import log_fields
from callgate.records import CallRecord, Effect, RunRecord, error_result, ok_result
from callgate.states import CallState
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, main, on_home_stream
from callgate.streams.worker import DeadLetter
from callgate.telemetry import spans
from callgate.tools.contract import Reconciliation, Tool, call_context

log = logging.getLogger("callgate.reconciler")

NOT_APPLIED = "the write was not applied; a retry needs a new decision"


class Reconciler:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger = runtime.ledger
        self.session = runtime.tool_session()

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case ReconcileRequest():
                await self.on_reconcile(message)
            case _:
                raise EnvelopeError(f"reconciler does not handle {message.kind!r}")

    async def on_reconcile(self, message: ReconcileRequest) -> None:
        run, [call] = await self.ledger.run_and_calls(message.run_id, [message.call_id])
        if call is None or run is None:
            raise NotFoundError(f"call {message.run_id}/{message.call_id} does not exist")
        if call.state == CallState.UNKNOWN:
            if not (await self.ledger.apply(self.ledger.claim_reconcile(call))).ok:
                return
        elif call.state != CallState.RECONCILING:
            return  # settled already
        crash_point("reconciler.after_claim")
        tool = self.rt.registry.get(call.tool)
        if tool is None or (tool.reconcile is None and tool.effect is not Effect.IDEMPOTENT_WRITE):
            raise NotFoundError(f"tool {call.tool!r} cannot reconcile")
        schedule = self.rt.settings.reconcile_schedule_s
        for attempt, delay_s in enumerate(schedule, start=1):
            if attempt < message.attempt:
                continue
            await asyncio.sleep(delay_s)
            with spans.reconcile(tool.name, call.call_id, attempt):
                answer = await self._ask(run, call, tool, attempt)
                spans.note_reconciliation(answer.found)
            log.info(
                "reconcile check",
                extra=log_fields(
                    run_id=call.run_id, call_id=call.call_id, attempt=attempt, found=answer.found
                ),
            )
            if answer.found != "unknown":
                await self._settle(call, answer, message.chain, tool.sensitive_fields)
                return
        await give_up(self.ledger, run, call)

    async def _ask(
        self, run: RunRecord, call: CallRecord, tool: Tool[Any], attempt: int
    ) -> Reconciliation:
        ctx = call_context(run, call, self.session, attempt)
        args = tool.validate(call.arguments or {})
        operation_id = call.operation_id or ""
        try:
            if tool.reconcile is not None:
                answer = await asyncio.wait_for(
                    tool.reconcile(ctx, args, operation_id), tool.timeout_s
                )
            else:
                # An idempotent write without a lookup: the same request under the same
                # operation id is the question, and the downstream's answer is the outcome.
                payload = await asyncio.wait_for(
                    tool.execute(ctx, args, operation_id), tool.timeout_s
                )
                answer = Reconciliation("applied", payload)
        except ToolError as exc:
            log.info("idempotent retry refused: %s", exc.code)
            return Reconciliation("not_applied")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.info("reconcile inconclusive: %s", type(exc).__name__)
            return Reconciliation("unknown")
        crash_point("reconciler.after_check")
        return answer

    async def _settle(
        self,
        call: CallRecord,
        answer: Reconciliation,
        chain: tuple[str, ...],
        sensitive: frozenset[str],
    ) -> None:
        reason = f"reconciled: {answer.found}"
        if answer.found == "applied":
            outcome = Outcome(CallState.SUCCEEDED, ok_result(answer.result or {}), reason)
        else:
            outcome = Outcome(CallState.FAILED, error_result("not_applied", NOT_APPLIED), reason)
        tx = self.ledger.settle_reconcile(call, outcome, chain, sensitive)
        await asyncio.shield(self.ledger.apply(tx))


async def give_up(ledger: Ledger, run: RunRecord, call: CallRecord) -> None:
    """Still unknown: pause the run and tell a human; nothing is replayed."""
    result = await asyncio.shield(ledger.apply(ledger.unresolved(run, call, pause=True)))
    if not result.ok:
        # The run was not in a state to pause (e.g. cancelled); settle the call alone.
        await ledger.apply(ledger.unresolved(run, call, pause=False))


async def _dead_letter(runtime: Runtime, letter: DeadLetter) -> None:
    """A reconcile order no delivery settled (its consumers kept dying mid-check): the outcome
    is still unknown, so the call goes to a person as when the checks run out.  Failing the
    run instead would strand a write that may have happened in ``reconciling``, outside every
    inbox, with no outcome ever recorded."""
    order = letter.envelope
    if not isinstance(order, ReconcileRequest) or not on_home_stream(runtime, letter):
        return
    ledger = runtime.ledger
    run, [call] = await ledger.run_and_calls(order.run_id, [order.call_id])
    if run is None or call is None or call.turn != order.turn:
        return
    if call.state == CallState.UNKNOWN:
        await ledger.apply(ledger.claim_reconcile(call))
        call = await ledger.get_call(order.run_id, order.call_id)
    if call is not None and call.state == CallState.RECONCILING:
        await give_up(ledger, run, call)


async def _make_handler(runtime: Runtime) -> Handler:
    return Reconciler(runtime).handle


SPEC = ServiceSpec("reconciler", ("reconcile",), _make_handler, _dead_letter)

if __name__ == "__main__":
    main(SPEC)
