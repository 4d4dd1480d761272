"""model_turn worker: asks the model for a turn, and starts the next turn once results are in.

Two kinds of message reach it: `TurnRequest` (call the provider, record the raw response and
what it means, hand tool requests to the validator) and `CallResult` (when every call of the
turn is terminal, append the results to the history in provider order and request the next
turn).  Both end in one guarded atomic step on the run, so redeliveries and racing replicas
are no-ops: a turn is requested exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import assert_never

import orjson

from callgate.crashpoints import crash_point
from callgate.envelopes import (
    CallResult,
    DecideOrder,
    Envelope,
    TurnRequest,
    ValidateRequest,
    decide_order,
)
from callgate.errors import EnvelopeError, NotFoundError
from callgate.ledger.steps import expect_recorded
from callgate.ledger.store import Ledger, require_calls
from callgate.ledger.tx import Tx
from callgate.logs import log_fields
from callgate.loop.carry import HistoryCarry, Started
from callgate.loop.decisions import (
    AskToFix,
    Finish,
    NextTurn,
    RetryModel,
    StartCalls,
    Wait,
    after_model,
    after_results,
    budget_end,
)
from callgate.loop.joins import TurnJoins
from callgate.providers import ADAPTERS, adapter_for
from callgate.providers.base import (
    FinalAnswer,
    ProviderAdapter,
    ToolResultInput,
    TurnInput,
    TurnOutcome,
)
from callgate.records import CallRecord, RunRecord
from callgate.redact import scrub, sensitive_values
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.service import Runtime, ServiceSpec, fail_run_for_dead_letter, main
from callgate.streams.worker import Delivery, Handler
from callgate.tools.acceptance import check_acceptance
from callgate.tools.contract import load_registry

log = logging.getLogger("callgate.model_turn")

TURNS_REMEMBERED = 1_000
"""Turns whose call ids and history a model_turn process carries to their next step
(`HistoryCarry`), the oldest first beyond this many."""
WAITING_FOR_RESULTS = (
    RunState.VALIDATING,
    RunState.EXECUTING,
    RunState.PAUSED_APPROVAL,
    RunState.PAUSED_UNKNOWN_OUTCOME,
)


def now_ms() -> int:
    return int(time.time() * 1000)


class ModelTurn:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.ledger: Ledger = runtime.ledger
        self._adapters: dict[str, ProviderAdapter] = {}
        self._carry = HistoryCarry(TURNS_REMEMBERED)
        self._joins = TurnJoins()

    def adapter(self, api: str) -> ProviderAdapter:
        if api not in self._adapters:
            self._adapters[api] = adapter_for(api, self.rt.settings.adapter_factory)
        return self._adapters[api]

    def warm_up(self) -> None:
        """Build every adapter's SDK client before serving: building one is blocking work
        which, done inside the first turn, stalls the loop long enough to miss heartbeats."""
        for api in ADAPTERS:
            try:
                getattr(self.adapter(api), "client", None)
            except Exception as exc:  # e.g. no API key for a provider this deployment skips
                log.info("adapter not ready", extra=log_fields(api=api, error=str(exc)))

    async def handle(self, message: Envelope, delivery: Delivery) -> None:
        match message:
            case TurnRequest():
                await self.on_turn_request(message, delivery)
            case CallResult():
                await self.on_call_result(message, delivery)
            case _:
                raise EnvelopeError(f"model_turn does not handle {message.kind!r}")

    # -- a turn ---------------------------------------------------------------------------

    async def on_turn_request(self, message: TurnRequest, delivery: Delivery) -> None:
        carried = self._carry.requested.take((message.run_id, message.turn))
        found: RunRecord | None
        if carried is not None:
            found, raw_history = carried
        else:
            found, raw_history = await self.ledger.run_and_history(message.run_id)
        run = _exists(message.run_id, found)
        if run.status != RunState.AWAITING_MODEL or run.turn != message.turn:
            return  # stale or duplicate: the turn was taken already
        history = [orjson.loads(item) for item in raw_history]
        ended = budget_end(run, now_ms())
        if ended is not None:
            await self._finish(run, Finish(RunState.HANDED_OFF, reason=ended), None, delivery)
            return
        adapter = self.adapter(run.api)
        registry = load_registry(run.tool_modules)
        turn_input = TurnInput(
            model=run.model,
            history=history,
            tools=registry.specs(run.allowed_tools),
            instructions=run.instructions,
            max_output_tokens=self.rt.settings.max_output_tokens,
            timeout_s=self.rt.settings.model_timeout_s,
        )
        attempt = 0
        while True:
            attempt += 1
            outcome = await adapter.complete(turn_input)
            crash_point("model_turn.after_request")
            acceptance_error = None
            if isinstance(outcome.event, FinalAnswer):
                acceptance_error = check_acceptance(run.acceptance, outcome.event.text)
            step = after_model(
                run,
                outcome.event,
                attempt=attempt,
                max_retries=self.rt.settings.model_max_retries,
                acceptance_error=acceptance_error,
            )
            if not isinstance(step, RetryModel):
                break
            await self._note_retry(run, outcome, step, attempt)
            await asyncio.sleep(step.delay_s)
        match step:
            case Finish():
                await self._finish(run, step, outcome, delivery)
            case StartCalls():
                await self._start_calls(run, step, outcome, delivery, raw_history)
            case AskToFix():
                await self._ask_to_fix(run, step, outcome, adapter, delivery)
            case _:
                assert_never(step)
        crash_point("model_turn.after_outbox")

    def _turn_tx(self, run: RunRecord, outcome: TurnOutcome | None) -> Tx:
        """The part every end of a turn shares: the raw response, usage, the event."""
        tx = Tx()
        if outcome is None:
            return tx
        record = outcome.record
        keys = self.rt.keys
        # orjson writes the dataclass as `to_json()` would, without deep-copying the response.
        tx.hset(keys.raw_responses(run.run_id), {str(run.turn): orjson.dumps(record)})
        tx.hincrby(keys.run(run.run_id), "usage_input_tokens", record.input_tokens)
        tx.hincrby(keys.run(run.run_id), "usage_output_tokens", record.output_tokens)
        self.ledger.event(
            tx,
            run.run_id,
            "model.response",
            turn=run.turn,
            response_id=record.response_id,
            outcome=outcome.event.kind,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
        )
        return tx

    async def _finish(
        self, run: RunRecord, step: Finish, outcome: TurnOutcome | None, delivery: Delivery
    ) -> None:
        tx = self._turn_tx(run, outcome)
        if outcome is not None and step.status == RunState.COMPLETED:
            tx.rpush(self.rt.keys.history(run.run_id), *_items(outcome.record.assistant_items))
        fields: dict[str, str] = {}
        if step.text is not None:
            fields["final_text"] = step.text
        if step.reason is not None:
            fields["reason"] = step.reason  # a refusal's reason is the model's own words
        shown = await self._echo_free(run, fields)
        self.ledger.run_transition(
            tx,
            run.run_id,
            [RunState.AWAITING_MODEL],
            step.status,
            expect_turn=run.turn,
            fields=fields,
            shown=shown,
        )
        if step.status in RUN_TERMINAL:
            await self.ledger.expire_finished(tx, run.run_id, run.turn)
        await self.ledger.apply(delivery.ack_with(tx))

    async def _echo_free(self, run: RunRecord, texts: dict[str, str]) -> dict[str, str]:
        """``texts`` as the event log may show them: the model saw every argument and result,
        so its words may repeat a value a tool marks sensitive, which events never hold.  Only
        runs with such a tool read their calls for it, once, at the end."""
        marked = {t.name: t.sensitive_fields for t in load_registry(run.tool_modules)}
        if not texts or not any(marked.values()):
            return texts
        values: set[str] = set()
        for call in await self.ledger.run_calls(run.run_id, run.turn):
            fields = marked.get(call.tool)
            if fields:
                values |= sensitive_values([call.arguments, call.result], fields)
        return {name: scrub(text, values) for name, text in texts.items()}

    async def _start_calls(
        self,
        run: RunRecord,
        step: StartCalls,
        outcome: TurnOutcome,
        delivery: Delivery,
        history: list[bytes],
    ) -> None:
        keys = self.rt.keys
        tx = self._turn_tx(run, outcome)
        created = now_ms()
        records: list[CallRecord] = []
        for index, call in enumerate(step.calls):
            record = CallRecord(
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
            records.append(record)
            self.ledger.create_call(tx, record)
        call_ids = [record.call_id for record in records]
        tx.rpush(keys.turn_calls(run.run_id, run.turn), *call_ids)
        assistant_items = _items(outcome.record.assistant_items)
        tx.rpush(keys.history(run.run_id), *assistant_items)
        self.ledger.run_transition(
            tx, run.run_id, [RunState.AWAITING_MODEL], RunState.VALIDATING, expect_turn=run.turn
        )
        self.ledger.outbox(
            tx,
            keys.run_stream("validate", run.run_id),
            ValidateRequest(
                run_id=run.run_id,
                turn=run.turn,
                call_ids=tuple(call_ids),
                order=_order(run, records),
            ),
        )
        key = (run.run_id, run.turn)
        validating = run.model_copy(
            update={
                "status": RunState.VALIDATING,
                "usage_input_tokens": run.usage_input_tokens + outcome.record.input_tokens,
                "usage_output_tokens": run.usage_output_tokens + outcome.record.output_tokens,
            }
        )
        started = Started(validating, tuple(records), [*history, *assistant_items])
        carried = self._carry.started.put(key, started)
        try:
            result = await self.ledger.apply(delivery.ack_with(tx))
        finally:
            if not tx.applied:
                self._carry.started.drop(key, carried)
        if result.failed and result.failed.key == keys.provider_calls(run.run_id):
            await self._refuse_reused_ids(run, step, outcome, delivery)

    async def _refuse_reused_ids(
        self, run: RunRecord, step: StartCalls, outcome: TurnOutcome, delivery: Delivery
    ) -> None:
        """The response reuses a provider call id of an earlier call: it is replayed or
        confused, and results pair by those ids, so no call is created and the run pauses."""
        reused = await self.ledger.reused_provider_call_ids(
            run.run_id, [c.provider_call_id for c in step.calls]
        )
        reason = f"provider call id reused from an earlier turn: {', '.join(reused)}"
        await self._finish(
            run, Finish(RunState.PAUSED_INCOMPLETE, reason=reason), outcome, delivery
        )

    async def _ask_to_fix(
        self,
        run: RunRecord,
        step: AskToFix,
        outcome: TurnOutcome,
        adapter: ProviderAdapter,
        delivery: Delivery,
    ) -> None:
        tx = self._turn_tx(run, outcome)
        items = [*outcome.record.assistant_items, *adapter.correction_items(step.message)]
        self._advance(tx, run, _items(items), reason="fix_answer")
        self.ledger.event(tx, run.run_id, "answer.rejected", turn=run.turn, reason=step.message)
        await self.ledger.apply(delivery.ack_with(tx))

    async def _note_retry(
        self, run: RunRecord, outcome: TurnOutcome, step: RetryModel, attempt: int
    ) -> None:
        tx = Tx()
        self.ledger.event(
            tx,
            run.run_id,
            "model.retry",
            turn=run.turn,
            attempt=attempt,
            reason=step.reason,
            delay_s=step.delay_s,
        )
        await self.ledger.apply(tx)
        log.info(
            "model retry",
            extra=log_fields(
                run_id=run.run_id, turn=run.turn, reason=step.reason, delay_s=step.delay_s
            ),
        )

    def _advance(self, tx: Tx, run: RunRecord, items: list[bytes], reason: str) -> None:
        """Append ``items`` to the history and request the next turn, guarded on this turn."""
        keys = self.rt.keys
        if items:
            tx.rpush(keys.history(run.run_id), *items)
        sources = (
            [run.status] if run.status != RunState.AWAITING_MODEL else [RunState.AWAITING_MODEL]
        )
        self.ledger.run_transition(
            tx,
            run.run_id,
            sources,
            RunState.AWAITING_MODEL,
            expect_turn=run.turn,
            fields={"turn": run.turn + 1},
        )
        self.ledger.outbox(
            tx,
            keys.run_stream("turns", run.run_id),
            TurnRequest(run_id=run.run_id, turn=run.turn + 1, reason=reason),
        )

    # -- results ----------------------------------------------------------------------------

    async def _turn(
        self, run_id: str, turn: int
    ) -> tuple[RunRecord, tuple[CallRecord, ...]] | None:
        """The run and the calls of its turn ``turn``; None if the run is past waiting for them.

        One round trip when this process created the turn (it remembers the call ids), else
        two: the turn's call list, then the calls."""
        started = self._carry.started.get((run_id, turn))
        known = None if started is None else started.call_ids
        if known is not None:
            run, maybe = await self.ledger.run_and_calls(run_id, known)
        else:
            run, listed = await self.ledger.run_and_turn_calls(run_id, turn)
        run = _exists(run_id, run)
        if run.turn != turn or run.status not in WAITING_FOR_RESULTS:
            return None
        if known is not None:
            return run, tuple(require_calls(run_id, known, maybe))
        return run, tuple(await self.ledger.get_calls(run_id, listed))

    async def on_call_result(self, message: CallResult, delivery: Delivery) -> None:
        turn = (message.run_id, message.turn)
        started = self._carry.started.get(turn)
        if started is not None:
            started.note(message)
        await self._joins.join(turn, lambda: self._join(message, delivery))

    async def _join(self, message: CallResult, delivery: Delivery) -> bool:
        """Advance or end the turn if every call is terminal; True if it waits no longer."""
        started = self._carry.started.get((message.run_id, message.turn))
        settled = None if started is None else started.settled()
        if started is not None and settled is None:
            # The results of parallel calls are read in one batch: let the handlers of the
            # others note theirs (`on_call_result`) before deciding they are not in hand.
            await asyncio.sleep(0)
            settled = started.settled()
        if started is not None and settled is not None:
            applied = await self._join_carried(started.run, settled, delivery)
            if applied:
                return True
        found = await self._turn(message.run_id, message.turn)
        if found is None:
            return True
        run, calls = found
        step = after_results(calls)
        match step:
            case Wait():
                return False
            case Finish():
                tx = Tx()
                self.ledger.run_transition(
                    tx,
                    run.run_id,
                    [run.status],
                    step.status,
                    expect_turn=run.turn,
                    fields={"reason": step.reason or ""},
                )
                return (await self.ledger.apply(delivery.ack_with(tx))).ok
            case NextTurn(calls=ordered):
                return await self._next_turn(Tx(), run, ordered, delivery)
            case _:
                assert_never(step)

    async def _join_carried(
        self, run: RunRecord, calls: tuple[CallRecord, ...], delivery: Delivery
    ) -> bool:
        """Append results that came with their outcomes, without reading the calls back:
        the step is guarded on the ledger holding exactly those outcomes, and on the run
        executing this turn.  False if it did not apply (the caller reads the ledger)."""
        step = after_results(calls)
        if not isinstance(step, NextTurn):
            return False  # rare (unresolved, waiting): the ledger path decides
        tx = Tx()
        for call in calls:
            key = self.rt.keys.call(run.run_id, call.call_id)
            try:
                expect_recorded(tx, CallRecord, key, {"state": call.state, "result": call.result})
            except ValueError:
                return False  # not a result at all: the ledger has the real one
        executing = run.model_copy(update={"status": RunState.EXECUTING})
        return await self._next_turn(tx, executing, step.calls, delivery)

    async def _next_turn(
        self, tx: Tx, run: RunRecord, ordered: tuple[CallRecord, ...], delivery: Delivery
    ) -> bool:
        """Append the turn's results to the history and request the next turn, in ``tx``."""
        adapter = self.adapter(run.api)
        results = _items(adapter.result_items([_result_input(c) for c in ordered]))
        self._advance(tx, run, results, reason="next")
        this_key, next_key = (run.run_id, run.turn), (run.run_id, run.turn + 1)
        started = self._carry.started.get(this_key)
        carried = None if started is None else self._carry_results(run, started, results)
        try:
            result = await self.ledger.apply(delivery.ack_with(tx))
        finally:
            if carried is not None and not tx.applied:
                self._carry.requested.drop(next_key, carried)
        if result.ok:
            if started is not None:
                self._carry.started.drop(this_key, started)  # the turn is over
            crash_point("model_turn.after_outbox")
        return result.ok

    def _carry_results(
        self, run: RunRecord, started: Started, results: list[bytes]
    ) -> tuple[RunRecord, list[bytes]]:
        """Hand the next turn request the run and history this step leaves (`HistoryCarry`)."""
        advanced = run.model_copy(update={"status": RunState.AWAITING_MODEL, "turn": run.turn + 1})
        return self._carry.requested.put(
            (run.run_id, run.turn + 1), (advanced, [*started.history, *results])
        )


def _order(run: RunRecord, calls: list[CallRecord]) -> DecideOrder | None:
    """The validator's order for ``calls``, unless a tool of theirs marks an argument
    sensitive: such a value is kept in the ledger's records only, never in a message."""
    registry = load_registry(run.tool_modules)
    for call in calls:
        tool = registry.get(call.tool)
        if tool is not None and tool.sensitive_fields:
            return None
    return decide_order(run, calls)


def _exists(run_id: str, run: RunRecord | None) -> RunRecord:
    if run is None:
        raise NotFoundError(f"run {run_id} does not exist")
    return run


def _items(items: list[dict[str, object]]) -> list[bytes]:
    return [orjson.dumps(item) for item in items]


def _result_input(call: CallRecord) -> ToolResultInput:
    """What the model is told about one call: its payload, or a structured error."""
    result = call.result or {"status": "error", "error": {"code": "no_result", "message": ""}}
    if result["status"] == "ok":
        return ToolResultInput(call.provider_call_id, _json_text(result["payload"]), False)
    return ToolResultInput(call.provider_call_id, _json_text({"error": result["error"]}), True)


def _json_text(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


async def _make_handler(runtime: Runtime) -> Handler:
    worker = ModelTurn(runtime)
    worker.warm_up()
    return worker.handle


SPEC = ServiceSpec("model_turn", ("turns", "results"), _make_handler, fail_run_for_dead_letter)

if __name__ == "__main__":
    main(SPEC)
