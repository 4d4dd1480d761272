"""What a run's event log means to a webhook receiver and to the metrics: pure functions.

The webhooks worker reads each run's event log (`callgate.records.Event`, written by the ledger's
steps) from its cursor and asks two questions of every entry, here, with no I/O:

* `webhook_event` — is it one of the four events receivers subscribe to?  A run entering a pause
  (``run.paused``) or an end (``run.finished``), an approval requested
  (``approval.requested``), a write whose outcome a person must resolve (``outcome.unknown``);
* `Tally.add` — which counters it moves: calls by tool and outcome, runs finished by status,
  reconciliations by who settled them and how, and how long approvals waited.

The event's id is ``<run id>/<entry id>``: stable however often the log is read, so a receiver
(and the worker's own dedup) recognises a delivery it has seen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from callgate.records import Event
from callgate.states import CALL_TERMINAL, RUN_PAUSED, RUN_TERMINAL, CallState
from callgate.webhooks.settings import EventType

WAIT_BUCKETS_S: tuple[float, ...] = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 86400)
"""Approval wait histogram buckets (seconds): people answer in seconds to a day."""
COUNTED_CALL_STATES = frozenset({*CALL_TERMINAL, CallState.UNKNOWN, CallState.UNRESOLVED})
"""Call outcomes counted: the terminal ones, and a write whose outcome went unknown."""
DECIDED = ("approval.approved", "approval.denied", "approval.expired")
RECONCILED = {"succeeded": "applied", "failed": "not_applied", "unresolved": "unresolved"}


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """One event as a receiver gets it (`body`)."""

    id: str
    """``<run id>/<event log entry id>``: the same on every delivery of this event."""
    type: EventType
    run_id: str
    t_ms: int
    data: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The JSON object a receiver gets (`body`)."""
        return {
            "id": self.id,
            "type": self.type,
            "run_id": self.run_id,
            "created_ms": self.t_ms,
            "data": dict(self.data),
        }

    def body(self) -> bytes:
        return orjson.dumps(self.as_dict())


def _to(data: Mapping[str, Any]) -> str | None:
    """The state a transition event names (None when it names none a state could be)."""
    to = data.get("to")
    return to if isinstance(to, str) else None


def _pick(data: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: data[name] for name in names if data.get(name) is not None}


def webhook_event(run_id: str, event: Event, tools: Mapping[str, str]) -> WebhookEvent | None:
    """The webhook event an entry of ``run_id``'s log is, if any (``tools``: call id → tool)."""
    data = event.data
    to = _to(data)
    kind: EventType
    if event.type == "run.transition" and to in RUN_PAUSED:
        kind, shown = "run.paused", {"status": to, **_pick(data, "reason", "turn")}
    elif event.type == "run.transition" and to in RUN_TERMINAL:
        kind, shown = "run.finished", {"status": to, **_pick(data, "reason", "turn")}
    elif event.type == "approval.requested":
        kind, shown = "approval.requested", dict(data)
    elif event.type == "call.transition" and to == CallState.UNRESOLVED:
        call_id = str(data.get("call_id", ""))
        kind = "outcome.unknown"
        shown = {"call_id": call_id, "tool": tools.get(call_id), **_pick(data, "reason")}
    else:
        return None
    return WebhookEvent(f"{run_id}/{event.id}", kind, run_id, event.t_ms, shown)


@dataclass
class Tally:
    """Counter increments from a run's new events, and the approval request times the next
    events need (``asked``: approval id → ms requested; None: decided, forget it)."""

    counts: Counter[str] = field(default_factory=Counter)
    asked: dict[str, int | None] = field(default_factory=dict)

    def add(self, event: Event, tools: Mapping[str, str], asked: Mapping[str, int]) -> None:
        """Count ``event`` (``asked``: request times known from earlier passes)."""
        data = event.data
        if event.type == "call.transition":
            self._call(data, tools)
        elif event.type == "run.transition" and (to := _to(data)) in RUN_TERMINAL:
            self.counts[f"finished|{to}"] += 1
        elif event.type == "call.resolved" and data.get("outcome"):
            self.counts[f"reconciled|person|{data['outcome']}"] += 1
        elif event.type == "approval.requested" and data.get("approval_id"):
            self.asked[str(data["approval_id"])] = event.t_ms
        elif event.type in DECIDED and data.get("approval_id"):
            self._decided(event, str(data["approval_id"]), asked)

    def _call(self, data: Mapping[str, Any], tools: Mapping[str, str]) -> None:
        to = _to(data)
        if to in COUNTED_CALL_STATES:
            tool = tools.get(str(data.get("call_id")), "unknown")
            self.counts[f"calls|{tool}|{to}"] += 1
        sources = data.get("from")
        if isinstance(sources, list) and CallState.RECONCILING in sources and to in RECONCILED:
            self.counts[f"reconciled|reconciler|{RECONCILED[to]}"] += 1

    def _decided(self, event: Event, approval_id: str, asked: Mapping[str, int]) -> None:
        requested = self.asked.get(approval_id) or asked.get(approval_id)
        self.asked[approval_id] = None
        if requested is None:
            return  # requested before the worker's cursor began: its wait is not known
        decision = event.type.split(".", 1)[1]
        wait_ms = max(0, event.t_ms - requested)
        for le in WAIT_BUCKETS_S:
            if wait_ms <= le * 1000:
                self.counts[f"wait|{decision}|{le:g}"] += 1
        self.counts[f"wait|{decision}|+Inf"] += 1
        self.counts[f"wait|{decision}|sum_ms"] += wait_ms
