"""The invariants of a chaos session, as pure functions over `callgate.ops.chaos.facts.Facts`.

Each check returns the offending items (empty = the invariant holds), so a failure names
what broke.  Required values: every list empty.

* lost run — its record vanished, or it never reached an end: a terminal state, or a pause
  only a human can clear (unknown outcome, incomplete response).  A run still waiting for an
  approval at the end counts as lost: the simulated approver decides every approval;
* duplicate write — a write (``effect: write``) whose operation id reached the booking
  service more than once, or any write or idempotent write with more than one reservation;
* unrequested effect — a reservation under an operation id no call of the session carries;
* write outcome mismatch — the ledger and the booking service disagree: a call recorded as
  succeeded without exactly one reservation, one recorded as failed/denied/rejected with one;
  or a denied, rejected or expired call that reached the service at all; or a write left
  ``unknown`` or ``reconciling`` at the end (no outcome recorded, in no person's inbox);
* call without exactly one result — a terminal call without a stored result, or moved into a
  terminal state by more (or fewer) than one event; a completed run with a call not terminal;
  a call the model was due an answer for that got none, or more than one;
* mispaired result — the model received, under a call's provider id, something other than
  that call's recorded result, or a result under an id no call of the run has;
* cancelled call executed — a call a cancel ended before it started whose operation id reached
  the booking service at all;
* cancel mismatch — a run a cancel applied to that is not ``cancelled`` at the end, whose model
  was asked another turn after it, or whose call in flight at the cancel did not end with its
  true outcome (terminal, and succeeded exactly when the service holds its reservation);
* resolve mismatch — a call a person resolved whose recorded outcome is not the booking
  service's (applied ⇔ the reservation exists), or a call left unresolved in a run whose plan
  has a person resolve it;
* reply not applied once — a reply the session sent that was admitted without exactly one
  ``run.reply`` event under its id, one refused (or still waiting) with any, or a reply id in
  a run's log that the session never sent;
* reply to an unfinished run — a reply applied when the log's last status for the run was not
  ``completed`` (a ``reject`` reply to a run that was busy, cancelled or failed is refused; an
  ``enqueue`` one waits for the run to complete);
* replied run unsettled — a run that took a reply and did not end at rest, or ended
  ``completed`` without the model having been asked the follow-up turn (its latest request
  the follow-up, so the result checks above hold the earlier turns' results, paired by call
  id, in that request) and answered it.  A run may also end otherwise after a reply (a cancel,
  an unknown outcome…): those are ends like any other;
* stranded calls — a call `callgate doctor` lists as stranded (`callgate.ops.stranded`): past
  its timeouts in a live run, in a state only a worker moves it on from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from callgate.ops.chaos.facts import Facts, PeopleFacts, RunFacts
from callgate.ops.chaos.workload import FOLLOW_UP
from callgate.records import CallRecord, ErrorResult, OkResult
from callgate.states import CALL_TERMINAL, RUN_TERMINAL, CallState, RunState

SETTLED = RUN_TERMINAL | {RunState.PAUSED_UNKNOWN_OUTCOME, RunState.PAUSED_INCOMPLETE}
"""Where a run may rest at the end of a session (nobody will act on it any more)."""
NEVER_RAN = frozenset({CallState.DENIED, CallState.REJECTED, CallState.EXPIRED})


def settled(status: str | None) -> bool:
    return status in SETTLED


def _end_status(r: RunFacts) -> str:
    """The run's status at the end, or ``no record`` if its record vanished."""
    return "no record" if r.run is None else r.run.status.value


def lost_runs(facts: Facts) -> list[str]:
    return [
        f"{r.plan.run_id}: {_end_status(r)}"
        for r in facts.runs
        if r.run is None or not settled(r.run.status)
    ]


def _is_write(call: CallRecord) -> bool:
    return call.effect in ("write", "idempotent_write") and bool(call.operation_id)


def _writes(facts: Facts) -> Iterator[tuple[RunFacts, CallRecord]]:
    for r in facts.runs:
        for call in r.calls:
            if _is_write(call):
                yield r, call


def duplicate_writes(facts: Facts) -> list[str]:
    found = []
    for r, call in _writes(facts):
        op = call.operation_id or ""
        requests, created = facts.reserve_requests.get(op, 0), facts.reservations.get(op, 0)
        if created > 1 or (call.effect == "write" and requests > 1):
            found.append(f"{r.plan.run_id}/{call.call_id} {op}: {requests} requests, {created}")
    return found


def unrequested_effects(facts: Facts) -> list[str]:
    known = {call.operation_id for _, call in _writes(facts)}
    return [op for op, n in facts.reservations.items() if n and op not in known]


def wrong_outcome(facts: Facts, call: CallRecord) -> bool:
    """The ledger's outcome of a write is not the booking service's."""
    op = call.operation_id or ""
    requests, created = facts.reserve_requests.get(op, 0), facts.reservations.get(op, 0)
    return (
        call.state in (CallState.UNKNOWN, CallState.RECONCILING)
        or (call.state == CallState.SUCCEEDED and created != 1)
        or (call.state in CALL_TERMINAL - {CallState.SUCCEEDED} and created != 0)
        or (call.state in NEVER_RAN and requests != 0)
    )


def write_outcome_mismatches(facts: Facts) -> list[str]:
    return [
        f"{r.plan.run_id}/{call.call_id} {call.state.value}: "
        f"{facts.reservations.get(call.operation_id or '', 0)} created"
        for r, call in _writes(facts)
        if wrong_outcome(facts, call)
    ]


def reservations_per_approved_call(facts: Facts) -> dict[str, int]:
    """How many reservations each approved write has (1; 0 when recorded as not applied)."""
    counts: Counter[str] = Counter()
    for _, call in _writes(facts):
        if call.approval_id and call.state in (CallState.SUCCEEDED, CallState.FAILED):
            counts[str(facts.reservations.get(call.operation_id or "", 0))] += 1
    return dict(sorted(counts.items()))


def _due(r: RunFacts) -> list[CallRecord]:
    """The calls whose results the model's latest request had to carry."""
    return [c for c in r.calls if c.turn <= r.turns_received]


def calls_without_one_result(facts: Facts) -> list[str]:
    found = []
    for r in facts.runs:
        completed = r.run is not None and r.run.status == RunState.COMPLETED
        for call in r.calls:
            where = f"{r.plan.run_id}/{call.call_id}"
            if call.state in CALL_TERMINAL and call.result is None:
                found.append(f"{where}: {call.state.value} without a result")
            elif call.state in CALL_TERMINAL and r.outcomes_recorded.get(call.call_id) != 1:
                found.append(f"{where}: {r.outcomes_recorded.get(call.call_id, 0)} outcomes")
            elif completed and call.state not in CALL_TERMINAL:
                found.append(f"{where}: {call.state.value} in a completed run")
        for call in _due(r):
            got = len(r.received.get(call.provider_call_id, ()))
            if got != 1:
                found.append(f"{r.plan.run_id}/{call.call_id}: the model got {got} results")
    return found


def told(result: OkResult | ErrorResult) -> Any:
    """What the model must be told for a recorded result: its payload or the error."""
    if isinstance(result, OkResult):
        return result.payload
    return {"error": result.error.model_dump()}


def same_result(content: str, result: OkResult | ErrorResult | None) -> bool:
    if result is None:
        return False
    expected = told(result)
    if isinstance(expected, str):
        return content == expected
    try:
        return bool(orjson.loads(content) == expected)
    except orjson.JSONDecodeError:
        return False


def mispaired_results(facts: Facts) -> list[str]:
    found = []
    for r in facts.runs:
        ids = {c.provider_call_id for c in r.calls}
        found += [f"{r.plan.run_id}: result for unknown id {i}" for i in r.received if i not in ids]
        for call in _due(r):
            contents = r.received.get(call.provider_call_id, ())
            if len(contents) == 1 and not same_result(contents[0], call.result):
                found.append(f"{r.plan.run_id}/{call.call_id}: the model got another result")
    return found


def cancelled_calls_executed(facts: Facts) -> list[str]:
    found = []
    for r, call in _writes(facts):
        op = call.operation_id or ""
        requests = facts.reserve_requests.get(op, 0)
        if call.state == CallState.CANCELLED and (requests or facts.reservations.get(op, 0)):
            found.append(f"{r.plan.run_id}/{call.call_id} cancelled: {requests} requests")
    return found


def _acted_on(
    facts: Facts, turn_of: Callable[[PeopleFacts], int | None]
) -> Iterator[tuple[RunFacts, int]]:
    """The runs a person's action reached, each with the turn ``turn_of`` gives for it."""
    for r in facts.runs:
        turn = turn_of(r.people)
        if turn is not None:
            yield r, turn


def cancel_mismatches(facts: Facts) -> list[str]:
    found = []
    for r, turn in _acted_on(facts, lambda people: people.cancel_turn):
        status = _end_status(r)
        if status != RunState.CANCELLED:
            found.append(f"{r.plan.run_id}: {status} after a cancel")
        if r.turns_received > max(turn - 1, 0):
            found.append(
                f"{r.plan.run_id}: the model was asked turn {r.turns_received + 1} "
                f"after a cancel at turn {turn}"
            )
        calls = {c.call_id: c for c in r.calls}
        for call_id in r.people.in_flight_at_cancel:
            call = calls.get(call_id)
            state = "gone" if call is None else call.state.value
            if (
                call is None
                or call.state not in CALL_TERMINAL - {CallState.CANCELLED}
                or (_is_write(call) and wrong_outcome(facts, call))
            ):
                found.append(f"{r.plan.run_id}/{call_id}: in flight at the cancel, now {state}")
    return found


RESOLVED_AS = {"applied": CallState.SUCCEEDED, "not_applied": CallState.FAILED}


def resolve_mismatches(facts: Facts) -> list[str]:
    found = []
    for r in facts.runs:
        calls = {c.call_id: c for c in r.calls}
        for call_id, outcomes in r.people.resolutions.items():
            call = calls.get(call_id)
            expected = RESOLVED_AS.get(outcomes[-1])
            if (
                call is None
                or (expected is not None and call.state != expected)
                or (call.state not in RESOLVED_AS.values() or wrong_outcome(facts, call))
            ):
                state = "gone" if call is None else call.state.value
                found.append(
                    f"{r.plan.run_id}/{call_id}: resolved {'/'.join(outcomes)}, now {state}"
                )
        if r.plan.resolve != "no":
            found += [
                f"{r.plan.run_id}/{c.call_id}: left unresolved"
                for c in r.calls
                if c.state == CallState.UNRESOLVED
            ]
    return found


def replies_not_applied_once(facts: Facts) -> list[str]:
    found = []
    for r in facts.runs:
        applied = r.people.replies
        sent = {s.reply_id: s for s in r.sent}
        found += [f"{r.plan.run_id}/{i}: applied, never sent" for i in applied if i not in sent]
        for reply in r.sent:
            times = len(applied.get(reply.reply_id, ()))
            if times != (1 if reply.verdict == "admitted" else 0):
                found.append(
                    f"{r.plan.run_id}/{reply.reply_id} ({reply.policy}): "
                    f"{reply.verdict}, applied {times} times"
                )
    return found


def replies_to_unfinished_runs(facts: Facts) -> list[str]:
    return [
        f"{r.plan.run_id}/{reply_id}: applied to a run that was {status}"
        for r in facts.runs
        for reply_id, before in r.people.replies.items()
        for status in before
        if status != RunState.COMPLETED
    ]


def replied_runs_unsettled(facts: Facts) -> list[str]:
    found = []
    for r, turn in _acted_on(facts, lambda people: people.reply_turn):
        if r.run is None or not settled(r.run.status):
            found.append(f"{r.plan.run_id}: {_end_status(r)} after a reply")
        elif r.run.status == RunState.COMPLETED and r.turns_received < turn - 1:
            found.append(f"{r.plan.run_id}: completed, the model never asked turn {turn}")
        elif r.run.status == RunState.COMPLETED and FOLLOW_UP not in (r.run.final_text or ""):
            found.append(f"{r.plan.run_id}: completed without answering the follow-up")
    return found


def stranded_calls(facts: Facts) -> list[str]:
    return list(facts.stranded)


CHECKS: dict[str, Callable[[Facts], list[str]]] = {
    "lost_runs": lost_runs,
    "duplicate_writes": duplicate_writes,
    "unrequested_effects": unrequested_effects,
    "write_outcome_mismatches": write_outcome_mismatches,
    "calls_without_one_result": calls_without_one_result,
    "mispaired_results": mispaired_results,
    "cancelled_calls_executed": cancelled_calls_executed,
    "cancel_mismatches": cancel_mismatches,
    "resolve_mismatches": resolve_mismatches,
    "replies_not_applied_once": replies_not_applied_once,
    "replies_to_unfinished_runs": replies_to_unfinished_runs,
    "replied_runs_unsettled": replied_runs_unsettled,
    "stranded_calls": stranded_calls,
}
"""Every invariant by name; each must find nothing."""


def check_all(facts: Facts) -> dict[str, list[str]]:
    """Every invariant by name → what violates it (all empty when the session is sound)."""
    return {name: check(facts) for name, check in CHECKS.items()}
