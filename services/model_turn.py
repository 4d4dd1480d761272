"""model_turn worker: asks the model for a turn, and starts the next turn once results are in.

Two kinds of message reach it.  `TurnRequest`: take the turn from its facts (the run and its
history, carried in-process from the step that requested it, or read), call the provider,
and record the raw response and what it means — the end of the run, or tool requests handed
to the validator.  `CallResult`: once every call of the turn is terminal, append the results
to the history in provider order and request the next turn.  Every end is one guarded step
on the run (its state, its turn and the history's length), so redeliveries and racing
replicas are no-ops: a turn is requested exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import assert_never

from callgate.clock import now_ms
from callgate.crashpoints import crash_point
from callgate.envelopes import CallResult, Envelope, TurnRequest
from callgate.errors import EnvelopeError, NotFoundError
from callgate.facts import (
    MISMATCH,
    DecideFacts,
    DecideRunFacts,
    Mismatch,
    ProposedCall,
    SettledCall,
    decide,
)
from callgate.ledger.binding import Binding, bind
from callgate.ledger.run_index import reused_provider_id
from callgate.ledger.steps import items_json
from callgate.ledger.store import require_calls
from callgate.ledger.tx import Tx, TxResult
from callgate.logs import log_fields
from callgate.loop.asking import ask_model, kept_response
from callgate.loop.carry import WAITING_FOR_RESULTS, HistoryCarry, JoinFacts, Started, TurnFacts
from callgate.loop.decisions import (
    AskToFix,
    Finish,
    NextTurn,
    RetryModel,
    StartCalls,
    Wait,
    after_results,
    budget_end,
)
from callgate.loop.joins import TurnJoins
from callgate.loop.results import echo_free, marks_sensitive, result_input
from callgate.providers import ADAPTERS, adapter_for
from callgate.providers.adapter import SdkAdapter
from callgate.providers.base import ProviderAdapter, TurnOutcome
from callgate.records import CallRecord, RunRecord
from callgate.states import RunState
from callgate.streams.delivery import Delivery, Handler
from callgate.streams.service import Runtime, ServiceSpec, fails_bound_run, main
from callgate.telemetry import spans
from callgate.tools.registry import ToolRegistry

log = logging.getLogger("callgate.model_turn")

TURNS_REMEMBERED = 1_000
"""Turns whose call ids and history a process carries to their next step (`HistoryCarry`)."""


class ModelTurn:
    def __init__(
        self, runtime: Runtime, adapters: Mapping[str, ProviderAdapter] | None = None
    ) -> None:
        """``adapters``: one per API to use instead of the SDK's (the schedule explorer's
        model, which answers with neutral events); the rest are built on first use."""
        self.rt = runtime
        self.ledger = runtime.ledger
        self._adapters: dict[str, ProviderAdapter] = dict(adapters or {})
        self._carry = HistoryCarry(TURNS_REMEMBERED if runtime.settings.carry else 0)
        self._joins = TurnJoins()

    @property
    def registry(self) -> ToolRegistry:
        """The process's registry now (an MCP server's changed tool list replaces it)."""
        return self.rt.registry

    def adapter(self, api: str) -> ProviderAdapter:
        if api not in self._adapters:
            self._adapters[api] = adapter_for(api, self.rt.settings.adapter_factory)
        return self._adapters[api]

    async def aclose(self) -> None:
        """Close the SDK clients the adapters made (on the runtime's shutdown)."""
        for adapter in self._adapters.values():
            if isinstance(adapter, SdkAdapter):
                await adapter.aclose()

    def warm_up(self) -> None:
        """Build every adapter's SDK client before serving: building one is blocking work
        which, done inside the first turn, stalls the loop long enough to miss heartbeats."""
        for api in ADAPTERS:
            try:
                getattr(self.adapter(api), "client", None)
            except Exception as exc:  # e.g. no API key for a provider this deployment skips
                log.info("adapter not ready", extra=log_fields(api=api, error=str(exc)))

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        where = {"run_id": message.run_id, "turn": message.turn}
        match message:
            case TurnRequest():
                carried = self._carry.requested.take((message.run_id, message.turn))
                await decide(
                    carried,
                    lambda: self._turn_facts(message),
                    lambda facts: self._take_turn(message, facts, delivery),
                    where,
                )
            case CallResult():
                started = self._carry.started.get((message.run_id, message.turn))
                if started is not None:
                    started.note(message)
                await self._joins.join(
                    (message.run_id, message.turn), lambda: self._join(message, delivery, where)
                )
            case _:
                raise EnvelopeError(f"model_turn does not handle {message.kind!r}")

    # -- a turn ---------------------------------------------------------------------------

    async def _turn_facts(self, message: TurnRequest) -> TurnFacts:
        run, history = await self.ledger.run_and_history(message.run_id)
        return TurnFacts(_exists(message.run_id, run), history)

    async def _take_turn(
        self, message: TurnRequest, facts: TurnFacts, delivery: Delivery
    ) -> Mismatch | None:
        run = facts.run
        if run.status != RunState.AWAITING_MODEL or run.turn != message.turn:
            return None  # stale or duplicate: the turn was taken already
        tx = Tx("take_turn")
        binding = self._bind_history(tx, run, facts.history)
        ended = budget_end(run, now_ms())
        if ended is not None:
            handed_off = Finish(RunState.HANDED_OFF, reason=ended)
            applied = await self._finish(tx, run, handed_off, None, delivery)
            return MISMATCH if binding.broken(applied) else None
        outcome, step, raw = await ask_model(self.rt, self.adapter(run.api), run, facts.history)
        self.ledger.model_response(tx, run, outcome.record, outcome.event.kind, raw, binding)
        match step:
            case Finish():
                applied = await self._finish(tx, run, step, outcome, delivery)
            case StartCalls():
                applied = await self._start_calls(tx, run, step, outcome, facts, delivery)
            case AskToFix():
                items = [
                    *outcome.record.assistant_items,
                    *self.adapter(run.api).correction_items(step.message),
                ]
                self.ledger.answer_rejected(tx, run, items_json(items), step.message)
                applied = await self._apply(tx, delivery)
            case RetryModel():
                raise AssertionError("retries are taken in ask_model")
            case _:
                assert_never(step)
        crash_point("model_turn.after_outbox")
        return MISMATCH if binding.broken(applied) else None

    def _bind_history(self, tx: Tx, run: RunRecord, history: list[bytes]) -> Binding:
        self.ledger.expect_history(tx, run.run_id, len(history))
        return Binding({(self.rt.keys.history(run.run_id), "")})

    async def _finish(
        self, tx: Tx, run: RunRecord, step: Finish, outcome: TurnOutcome | None, delivery: Delivery
    ) -> TxResult:
        fields: dict[str, str] = {}
        if step.text is not None:
            fields["final_text"] = step.text
        if step.reason is not None:
            fields["reason"] = step.reason  # a refusal's reason is the model's own words
        shown = fields
        if fields and marks_sensitive(self.registry, run.allowed_tools):
            shown = echo_free(
                fields, await self.ledger.run_calls(run.run_id, run.turn), self.registry
            )
        assistant: list[bytes] = []
        if outcome is not None and step.status == RunState.COMPLETED:
            assistant = items_json(outcome.record.assistant_items)
        await self.ledger.finish_turn(
            tx, run, step.status, fields=fields, shown=shown, assistant=assistant
        )
        applied = await self._apply(tx, delivery)
        if applied.ok:
            spans.run_ended(run, step.status)
        return applied

    async def _start_calls(
        self,
        tx: Tx,
        run: RunRecord,
        step: StartCalls,
        outcome: TurnOutcome,
        facts: TurnFacts,
        delivery: Delivery,
    ) -> TxResult:
        created = now_ms()
        calls = [
            CallRecord(
                run_id=run.run_id,
                call_id=f"t{run.turn}.{index}",
                turn=run.turn,
                index=index,
                provider_call_id=call.provider_call_id,
                tool=call.name,
                arguments=call.arguments,
                raw_arguments=call.raw_arguments,
                created_ms=created,
                updated_ms=created,
            )
            for index, call in enumerate(step.calls)
        ]
        assistant = items_json(outcome.record.assistant_items)
        self.ledger.start_calls(tx, run, calls, assistant, self._decide_facts(run, calls))
        validating = run.model_copy(
            update={
                "status": RunState.VALIDATING,
                "usage_input_tokens": run.usage_input_tokens + outcome.record.input_tokens,
                "usage_output_tokens": run.usage_output_tokens + outcome.record.output_tokens,
            }
        )
        key = (run.run_id, run.turn)
        started = self._carry.started.put(
            key, Started(validating, tuple(calls), [*facts.history, *assistant])
        )
        try:
            result = await self.ledger.apply(delivery.ack_with(tx))
        finally:
            if not tx.applied:
                self._carry.started.drop(key, started)
        if reused_provider_id(result.failed, self.rt.keys.run_index(run.run_id)):
            await self._refuse_reused_ids(run, step, outcome, delivery)
        return result

    def _decide_facts(self, run: RunRecord, calls: list[CallRecord]) -> DecideFacts | None:
        """What the validator decides on, carried unless a tool marks an argument sensitive:
        such a value is kept in the ledger's records only, never in a message."""
        if not self.rt.settings.carry or marks_sensitive(self.registry, (c.tool for c in calls)):
            return None
        return DecideFacts(
            run=DecideRunFacts.of(run), calls=tuple(ProposedCall.of(c) for c in calls)
        )

    async def _refuse_reused_ids(
        self, run: RunRecord, step: StartCalls, outcome: TurnOutcome, delivery: Delivery
    ) -> None:
        """The response reuses a provider call id of an earlier call: it is replayed or
        confused, and results pair by those ids, so no call is created and the run pauses."""
        reused = await self.ledger.reused_provider_call_ids(
            run.run_id, [c.provider_call_id for c in step.calls]
        )
        reason = f"provider call id reused from an earlier turn: {', '.join(reused)}"
        tx = self.ledger.model_response(
            Tx("finish_turn"),
            run,
            outcome.record,
            outcome.event.kind,
            kept_response(outcome, self.rt.settings)[0],
        )
        await self._finish(
            tx, run, Finish(RunState.PAUSED_INCOMPLETE, reason=reason), outcome, delivery
        )

    async def _apply(self, tx: Tx, delivery: Delivery) -> TxResult:
        return await self.ledger.apply(delivery.ack_with(tx))

    # -- results ----------------------------------------------------------------------------

    async def _join(
        self, message: CallResult, delivery: Delivery, where: dict[str, object]
    ) -> bool:
        """Advance or end the turn if every call is terminal; True if it waits no longer."""
        started = self._carry.started.get((message.run_id, message.turn))
        carried = None if started is None else started.settled()
        if started is not None and carried is None:
            # The results of parallel calls are read in one batch: let the handlers of the
            # others note theirs before deciding they are not in hand.
            await asyncio.sleep(0)
            carried = started.settled()
        settled = await decide(
            carried,
            lambda: self._join_facts(message, started),
            lambda facts: self._settle_turn(facts, delivery),
            where,
        )
        return settled is not False

    async def _join_facts(self, message: CallResult, started: Started | None) -> JoinFacts | None:
        """The run and the calls of the turn; None if the run is past waiting for them.  One
        round trip when this process created the turn (it knows the call ids), else two."""
        run_id, turn = message.run_id, message.turn
        if started is not None:
            found, calls = await self.ledger.run_and_calls(run_id, started.call_ids)
            run = _exists(run_id, found)
            if run.turn != turn or run.status not in WAITING_FOR_RESULTS:
                return None
            return JoinFacts(run, tuple(require_calls(run_id, started.call_ids, calls)))
        found, call_ids = await self.ledger.run_and_turn_calls(run_id, turn)
        run = _exists(run_id, found)
        if run.turn != turn or run.status not in WAITING_FOR_RESULTS:
            return None
        return JoinFacts(run, tuple(await self.ledger.get_calls(run_id, call_ids)))

    async def _settle_turn(self, facts: JoinFacts, delivery: Delivery) -> bool | Mismatch:
        """End or advance the turn from its calls' outcomes, bound to those very outcomes."""
        run = facts.run
        step = after_results(facts.calls)
        tx = Tx("settle_turn")
        binding = Binding()
        for call in facts.calls:
            bind(tx, self.rt.keys.call(run.run_id, call.call_id), SettledCall.of(call), binding)
        match step:
            case Wait():
                return False
            case Finish():
                self.ledger.end_turn(tx, run, step.status, step.reason or "")
                result = await self.ledger.apply(delivery.ack_with(tx))
            case NextTurn(calls=ordered):
                result = await self._next_turn(tx, run, ordered, delivery)
            case _:
                assert_never(step)
        if not result.ok and (facts.carried or binding.broken(result)):
            return MISMATCH
        return result.ok

    async def _next_turn(
        self, tx: Tx, run: RunRecord, ordered: tuple[CallRecord, ...], delivery: Delivery
    ) -> TxResult:
        """Append the turn's results to the history and request the next turn, in ``tx``."""
        adapter = self.adapter(run.api)
        results = items_json(adapter.result_items([result_input(c) for c in ordered]))
        self.ledger.advance_turn(tx, run, results, reason="next")
        this_key, next_key = (run.run_id, run.turn), (run.run_id, run.turn + 1)
        started = self._carry.started.get(this_key)
        carried = None
        if started is not None:
            advanced = run.model_copy(
                update={"status": RunState.AWAITING_MODEL, "turn": run.turn + 1}
            )
            carried = self._carry.requested.put(
                next_key, TurnFacts(advanced, [*started.history, *results])
            )
        try:
            result = await self.ledger.apply(delivery.ack_with(tx))
        finally:
            if carried is not None and not tx.applied:
                self._carry.requested.drop(next_key, carried)
        if result.ok:
            if started is not None:
                self._carry.started.drop(this_key, started)  # the turn is over
            crash_point("model_turn.after_outbox")
        return result


def _exists(run_id: str, run: RunRecord | None) -> RunRecord:
    if run is None:
        raise NotFoundError(f"run {run_id} does not exist")
    return run


async def _make_handler(runtime: Runtime) -> Handler:
    worker = ModelTurn(runtime)
    worker.warm_up()
    runtime.closers.append(worker.aclose)
    return worker.handle


SPEC = ServiceSpec(
    "model_turn", ("turns", "results"), _make_handler, fails_bound_run(TurnRequest, CallResult)
)

if __name__ == "__main__":
    main(SPEC)
