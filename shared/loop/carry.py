"""What a model_turn process wrote for a run's turn, kept for that turn's next step.

A run's history is append-only and only model_turn's guarded steps append to it, so the items
a process has just written are exactly what Redis holds after its step: the next step of the
same turn, if this process handles it, need not read them back.  Two hand-overs:

* *started*: a turn whose calls went to the validator — the run and the calls as its step
  left them (a turn's call list is written once, so each result saves reading it) and its
  history, assistant items included, for the step that appends the results.  Results that
  arrive with their outcome (`CallResult.result`) are collected here: once every call's is
  in hand, that step need not read the calls back either (`settled`); it binds the outcomes
  (`callgate.facts.SettledCall`), so it decides from the ledger if they do not hold;
* *requested*: a turn whose results were appended and whose next turn was requested — the run
  record as that step left it and the history (`TurnFacts`), for the turn request; its steps
  are guarded on the history's length.

An entry is put *before* its step is applied: the message that leads to its use is written by
that step, so the use can never come first.  It is dropped if the step did not apply.  A miss
(another replica took the message, the entry was evicted) reads the ledger as before.  The run
record may still be moved on by another worker (a cancellation, an expiry); the turn's own
step is guarded on the run's status and turn, so that race costs at most one model call whose
answer is dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from callgate.envelopes import CallResult
from callgate.records import CallRecord, RunRecord
from callgate.states import CallState, RunState

_CALL_STATES = frozenset(state.value for state in CallState)
Key = tuple[str, int]
"""(run_id, turn)."""
V = TypeVar("V")


class _Bounded(Generic[V]):
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: OrderedDict[Key, V] = OrderedDict()

    def put(self, key: Key, value: V) -> V:
        self._items[key] = value
        if len(self._items) > self._limit:
            self._items.popitem(last=False)
        return value

    def get(self, key: Key) -> V | None:
        return self._items.get(key)

    def take(self, key: Key) -> V | None:
        return self._items.pop(key, None)

    def drop(self, key: Key, value: V) -> None:
        """Remove ``value`` if it is still the entry (a racing step may have replaced it)."""
        if self._items.get(key) is value:
            del self._items[key]


WAITING_FOR_RESULTS = frozenset(
    {
        RunState.VALIDATING,
        RunState.EXECUTING,
        RunState.PAUSED_APPROVAL,
        RunState.PAUSED_UNKNOWN_OUTCOME,
    }
)
"""The states a run waits in while its turn's calls settle."""


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What a turn is taken from: the run as its last step left it, and its history."""

    run: RunRecord
    history: list[bytes]


@dataclass(frozen=True, slots=True)
class JoinFacts:
    """A turn's calls as the step that joins their results decides on them.  ``carried``:
    from result messages, with the run as this process last wrote it (``executing`` once
    every call is terminal); a step on them that does not apply decides from the ledger."""

    run: RunRecord
    calls: tuple[CallRecord, ...]
    carried: bool = False


@dataclass(frozen=True, slots=True)
class Started:
    run: RunRecord
    calls: tuple[CallRecord, ...]
    history: list[bytes]
    results: dict[str, CallResult] = field(default_factory=dict)
    """Result messages that carried their outcome, by call id."""

    @property
    def call_ids(self) -> list[str]:
        return [call.call_id for call in self.calls]

    def note(self, message: CallResult) -> None:
        """Keep ``message`` if it carries the outcome of a call of this turn."""
        if message.result is None or message.state not in _CALL_STATES:
            return
        if any(call.call_id == message.call_id for call in self.calls):
            self.results[message.call_id] = message

    def settled(self) -> JoinFacts | None:
        """Every call with the outcome its result message carried, once all are in hand."""
        if len(self.results) != len(self.calls):
            return None
        calls = tuple(
            call.model_copy(
                update={
                    "state": CallState(self.results[call.call_id].state),
                    "result": self.results[call.call_id].result,
                }
            )
            for call in self.calls
        )
        executing = self.run.model_copy(update={"status": RunState.EXECUTING})
        return JoinFacts(executing, calls, carried=True)


class HistoryCarry:
    def __init__(self, limit: int) -> None:
        self.started: _Bounded[Started] = _Bounded(limit)
        self.requested: _Bounded[TurnFacts] = _Bounded(limit)
