"""The ledger's vocabulary: the pieces every named step is built from, as Tx builders.

Each helper *appends* to a `Tx`, so a named step (`run_steps`, `call_steps`,
`approval_steps`) combines several — a call transition, its event, the next hop's outbox
message — into one atomic step.  Every state change is checked against the state machine
here, before anything is sent, and becomes a compare-and-set guard plus the writes; every
event payload goes through `redact`.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol

import orjson

from callgate import envelopes
from callgate.auth.tenancy import prefix_tenant
from callgate.clock import now_ms
from callgate.config import Settings
from callgate.hash_fields import encode_fields
from callgate.keys import IndexOf, Keys
from callgate.ledger.run_index import provider_field, turn_field
from callgate.ledger.tx import Tx, Value
from callgate.records import CallRecord, RunRecord, result_code
from callgate.redact import redact
from callgate.states import CallState, RunState, check_call, check_run

LOG_OUTLIVES_S = 1
"""A run's event log expires this long after its records, so a step that finds one of them
finds the log (`LedgerBase._log_outlives`).  The step that ends a run gives every key its
expiry at once (Redis 7 freezes a script's clock; 6.2 reads it per command, microseconds
apart): a second is margin enough, and keeps the retention's promise."""


class CallRef(Protocol):
    """Which call a step is about: a call record, or a per-call message, will do."""

    @property
    def run_id(self) -> str: ...
    @property
    def call_id(self) -> str: ...
    @property
    def turn(self) -> int: ...


def _shown(fields: dict[str, Any]) -> dict[str, Any]:
    """What a call's event keeps of its fields: a result by its code only.  The record keeps
    the result; its payload is whatever the tool's system returned, and the event log holds
    result codes (`callgate.records`)."""
    result = fields.get("result")
    if result is None:
        return fields
    shown = {name: value for name, value in fields.items() if name != "result"}
    shown["result_code"] = result_code(result)
    return shown


def _states(states: Any) -> list[str]:
    return [str(states)] if isinstance(states, str) else [str(s) for s in states]


def _cas(
    tx: Tx,
    check: Callable[[str, str], None],
    model: type[RunRecord] | type[CallRecord],
    key: str,
    state_field: str,
    from_states: Any,
    to_state: str,
    fields: dict[str, Any] | None,
    extra_guards: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """Append guard + update of one state change; everything is checked before ``tx`` grows."""
    sources = _states(from_states)
    if not sources:
        raise ValueError("a transition needs at least one source state")
    for source in sources:
        check(source, to_state)
    fields = fields or {}
    if state_field in fields:
        raise ValueError(f"{state_field!r} is set by the transition itself")
    to_set, to_delete = encode_fields(model, {**fields, "updated_ms": now_ms()})
    tx.expect(key, state_field, *sources)
    for name, value in extra_guards:
        tx.expect(key, name, value)
    tx.hset(key, {state_field: str(to_state), **to_set})
    if to_delete:
        tx.hdel(key, *to_delete)
    return sources


class LedgerBase:
    """Tx builders bound to a key layout and settings; `Ledger` (`callgate.ledger.store`) adds
    the I/O and the named steps."""

    def __init__(self, keys: Keys, settings: Settings) -> None:
        self.keys = keys
        self.settings = settings

    def run_transition(
        self,
        tx: Tx,
        run_id: str,
        from_states: RunState | Iterable[RunState],
        to_state: RunState,
        *,
        expect_turn: int | None = None,
        fields: dict[str, Any] | None = None,
        shown: dict[str, Any] | None = None,
    ) -> Tx:
        """Append a CAS ``status ∈ from_states → to_state`` (+ fields, + event) to ``tx``.

        Every pair is checked against the state machine first, so an illegal transition raises
        `TransitionError` before anything is sent.  ``shown`` replaces values of ``fields`` in
        the event only (a final text scrubbed of sensitive values it repeats).
        """
        guards = [] if expect_turn is None else [("turn", str(expect_turn))]
        key = self.keys.run(run_id)
        sources = _cas(
            tx, check_run, RunRecord, key, "status", from_states, to_state, fields, guards
        )
        self._log_outlives(tx, run_id)
        data: dict[str, Any] = {
            "from": sources,
            "to": str(to_state),
            **(fields or {}),
            **(shown or {}),
        }
        if expect_turn is not None:
            data.setdefault("turn", expect_turn)
        self.event(tx, run_id, "run.transition", **data)
        return tx

    def _log_outlives(self, tx: Tx, run_id: str) -> None:
        """``tx`` guards a field of one of the run's records, so that record exists when the
        step applies; and the run's log outlives all of them (`finish_run_ttl`), so the log
        is the stream start_run wrote with the run: no other role can change a stream's
        type.  The script need not ask its TYPE (`Tx.vouch`)."""
        tx.vouch(self.keys.events(run_id))

    def call_transition(
        self,
        tx: Tx,
        run_id: str,
        call_id: str,
        from_states: CallState | Iterable[CallState],
        to_state: CallState,
        fields: dict[str, Any] | None = None,
        *,
        sensitive: Collection[str] = frozenset(),
    ) -> Tx:
        """Append a CAS ``state ∈ from_states → to_state`` (+ fields, + event) to ``tx``.

        ``sensitive`` names argument fields the tool marks private; they never reach the event.
        """
        key = self.keys.call(run_id, call_id)
        sources = _cas(tx, check_call, CallRecord, key, "state", from_states, to_state, fields)
        self._log_outlives(tx, run_id)
        data = {"call_id": call_id, "from": sources, "to": str(to_state), **_shown(fields or {})}
        self.event(tx, run_id, "call.transition", sensitive=sensitive, **data)
        return tx

    def create_calls(
        self, tx: Tx, calls: Sequence[CallRecord], *, sensitive: Collection[str] = frozenset()
    ) -> Tx:
        """Append the create-once of one turn's calls (state as given, normally
        ``requested``), in provider order, and their turn's entry in the run's index; it fails,
        like a lost race, if the turn already made calls or the run already has a call with one
        of their provider call ids (results pair by those: none is used twice)."""
        if not calls:
            raise ValueError("create_calls needs the turn's calls")
        run_id, turn = calls[0].run_id, calls[0].turn
        if any((call.run_id, call.turn) != (run_id, turn) for call in calls):
            raise ValueError("create_calls takes the calls of one turn of one run")
        index = self.keys.run_index(run_id)
        tx.expect_field_missing(index, turn_field(turn))
        entries: dict[str, Value] = {turn_field(turn): orjson.dumps([c.call_id for c in calls])}
        for call in calls:
            tx.expect_field_missing(index, provider_field(call.provider_call_id))
            entries[provider_field(call.provider_call_id)] = call.call_id
        tx.vouch(index).hset(index, entries)
        stamp = now_ms()
        for call in calls:
            self._create_call(tx, call, stamp, sensitive)
        return tx

    def _create_call(
        self, tx: Tx, call: CallRecord, stamp: int, sensitive: Collection[str]
    ) -> None:
        """One call's record and event.  Its turn's field was found missing in the run's index,
        which the step that writes a call record writes too: the record does not exist, and
        only the workers write call records, as hashes (`Tx.vouch`)."""
        if not call.created_ms:
            call = call.model_copy(update={"created_ms": stamp, "updated_ms": stamp})
        key = self.keys.call(call.run_id, call.call_id)
        tx.vouch(key).hset(key, call.to_hash())
        self.event(
            tx,
            call.run_id,
            "call.created",
            sensitive=sensitive,
            call_id=call.call_id,
            turn=call.turn,
            index=call.index,
            tool=call.tool,
            tool_version=call.tool_version,
            args_hash=call.args_hash,
            state=call.state.value,
        )

    def event(
        self,
        tx: Tx,
        run_id: str,
        type: str,
        *,
        sensitive: Collection[str] = frozenset(),
        **data: Any,
    ) -> Tx:
        """Append one redacted event to the run's event log (with the step's others, in one
        entry: `Tx.event`)."""
        payload = orjson.dumps(redact(data, sensitive), default=str)
        return tx.event(self.keys.events(run_id), type, payload, now_ms())

    def outbox(self, tx: Tx, stream: str, envelope: Any) -> Tx:
        """Append the message a state change triggers, in the same atomic step (field ``d``).
        A partition's streams are only ever streams (`Tx.vouch`)."""
        return tx.vouch(stream).xadd(stream, {"d": envelopes.encode(envelope)})

    def append_history(self, tx: Tx, run_id: str, items: Sequence[bytes]) -> Tx:
        """Append provider-native items to the run's history, a list only the workers write
        (`Tx.vouch`)."""
        key = self.keys.history(run_id)
        return tx.vouch(key).rpush(key, *items)

    def notify(self, tx: Tx, run_id: str, envelope: Any) -> Tx:
        """Append a notification for people (Slack, the inbox) to the run's notify stream,
        which keeps about ``notify_max_entries`` even when nobody reads it."""
        stream = self.keys.run_stream("notify", run_id)
        return tx.vouch(stream).xadd(
            stream, {"d": envelopes.encode(envelope)}, cap=self.settings.notify_max_entries
        )

    def tenant_copy(self, index_of: IndexOf, run_id: str) -> str | None:
        """The tenant's copy of the partition index ``index_of`` that ``run_id``'s entries
        belong in, None for a run of no tenant: its prefix names the tenant, as it does for
        every key of the run (`callgate.auth.tenancy`), so no read is needed to find it."""
        tenant = prefix_tenant(run_id)
        return None if tenant is None else index_of(self.keys.partition(run_id), tenant)

    def inbox_add(self, tx: Tx, index_of: IndexOf, run_id: str, item_id: str, score: float) -> Tx:
        """Add ``"<run_id> <item_id>"`` to the partition's inbox index ``index_of`` (pending
        approvals, unresolved calls) and to its run's tenant's copy, in the same step: a
        tenant's approvers read the copy, never the partition's index."""
        return self.index_add(tx, index_of, run_id, {f"{run_id} {item_id}": score})

    def index_add(self, tx: Tx, index_of: IndexOf, run_id: str, members: dict[str, float]) -> Tx:
        """Add ``members`` of ``run_id`` to the partition index ``index_of`` and to its run's
        tenant's copy, in the same step."""
        for index in self._indexes(index_of, run_id):
            tx.vouch(index).zadd(index, members)
        return tx

    def inbox_remove(self, tx: Tx, index_of: IndexOf, run_id: str, item_id: str) -> Tx:
        """Take ``"<run_id> <item_id>"`` out of ``index_of`` and its tenant's copy (`inbox_add`)."""
        for index in self._indexes(index_of, run_id):
            tx.vouch(index).zrem(index, f"{run_id} {item_id}")
        return tx

    def _indexes(self, index_of: IndexOf, run_id: str) -> list[str]:
        """The partition's index ``index_of`` and its run's tenant's copy, if any: sorted sets
        only the workers write (`Tx.vouch`)."""
        copy = self.tenant_copy(index_of, run_id)
        partition = index_of(self.keys.partition(run_id), None)
        return [partition] if copy is None else [partition, copy]

    def finish_run_ttl(
        self, tx: Tx, run_id: str, call_ids: Iterable[str] = (), approval_ids: Iterable[str] = ()
    ) -> Tx:
        """Let every key of a finished run expire after ``settings.retention_s``.

        Call and approval records expire only if their ids are passed: `Ledger.retention`
        reads them from the run's index.  The log expires `LOG_OUTLIVES_S` after the rest
        (`_log_outlives`).  The run leaves the deadline index now (a finished run has no
        deadline left); its entry in the runs index and the inbox go once its keys expired
        (`Ledger.prune_expired_runs`).
        """
        keys = self.keys
        deadlines = keys.deadlines(keys.partition(run_id))
        tx.vouch(deadlines).zrem(deadlines, run_id)
        log, retention_s = keys.events(run_id), self.settings.retention_s
        for key in self.run_keys(run_id, call_ids, approval_ids):
            tx.expire(key, retention_s + LOG_OUTLIVES_S if key == log else retention_s)
        return tx

    def run_keys(
        self, run_id: str, call_ids: Iterable[str], approval_ids: Iterable[str]
    ) -> Iterator[str]:
        """Every key a run made: what expires when it ends, and lives on when it resumes."""
        keys = self.keys
        yield from (
            keys.run(run_id),
            keys.history(run_id),
            keys.raw_responses(run_id),
            keys.events(run_id),
            keys.run_index(run_id),
            keys.decisions_seen(run_id),
        )
        yield from (keys.call(run_id, call_id) for call_id in call_ids)
        yield from (keys.approval(run_id, approval_id) for approval_id in approval_ids)
