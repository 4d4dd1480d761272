"""The facts a session's invariants are checked against, collected from the authoritative
sides once the runs have settled (I/O only; the checks are `callgate.ops.chaos.invariants`).

* the ledger: every run record, every call record, every call's transitions in the event log,
  and what people did (a cancel applied or refused, where each call was at the cancel, each
  resolution, each reply admitted and where the run stood before it);
* the booking service (the system of record for writes): requests and reservations created
  per operation id;
* the stranded calls `callgate doctor` would list (`callgate.ops.stranded`);
* the scripted model server: what the model actually received — for each run, the tool
  results in its most advanced request, by provider call id, read with the server's own
  conversation parser (`callgate.standins.scripted.history`), as the session always runs against it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from callgate.connect import RedisClient
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.stranded import find_stranded
from callgate.records import CallRecord, RunRecord
from callgate.standins.scripted.history import (
    Conversation,
    from_anthropic,
    from_chat,
    from_responses,
)
from callgate.states import CALL_TERMINAL, CallState

_PARSERS = {
    "/v1/responses": from_responses,
    "/v1/chat/completions": from_chat,
    "/v1/messages": from_anthropic,
}
_MARKER = re.compile(r"\[chaos ([A-Za-z0-9_.:-]+)\]")


@dataclass(frozen=True)
class PeopleFacts:
    """What people did to one run, from its event log."""

    cancel_turn: int | None = None
    """The turn the run was at when a cancel applied (None: never cancelled)."""
    in_flight_at_cancel: tuple[str, ...] = ()
    """Calls under way at the cancel (executing, unknown, reconciling, unresolved)."""
    cancels_refused: int = 0
    resolutions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Call id → the resolutions applied to it (applied, not_applied, recheck), in order."""
    replies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Reply id → for each ``run.reply`` event under it, the status the log last recorded for
    the run before that reply's own transition (``completed`` is the only right one)."""
    reply_turn: int | None = None
    """The turn the latest admitted reply opened."""


@dataclass(frozen=True)
class SentReply:
    """A reply the session's user sent, and the verdict callgate gave it."""

    reply_id: str
    policy: str
    verdict: str
    """``admitted``, ``refused``, or ``none`` (no verdict: an enqueued reply to a run that
    never completed again still waits)."""


@dataclass(frozen=True)
class RunFacts:
    plan: PlannedRun
    run: RunRecord | None
    calls: tuple[CallRecord, ...]
    outcomes_recorded: Mapping[str, int]
    """Call id → how many events moved it into a terminal state (exactly one is right)."""
    received: Mapping[str, tuple[str, ...]]
    """Provider call id → the result contents the model received for it (latest request)."""
    turns_received: int
    """Assistant turns in that request: the calls of turns up to this must all be answered."""
    people: PeopleFacts = field(default_factory=PeopleFacts)
    sent: tuple[SentReply, ...] = ()


@dataclass(frozen=True)
class Facts:
    runs: tuple[RunFacts, ...]
    reserve_requests: Mapping[str, int]
    """Booking service: POST /reservations received, per operation id."""
    reservations: Mapping[str, int]
    """Booking service: reservations created, per operation id."""
    dead_letters: int
    model_requests: int
    model_drops: int
    stranded: tuple[str, ...] = ()
    """What `callgate doctor` lists as stranded calls, one line each."""


def expired_calls(facts: Facts) -> int:
    """Calls whose approval nobody decided in time."""
    return sum(call.state == CallState.EXPIRED for r in facts.runs for call in r.calls)


async def http_json(method: str, url: str, body: Any = None) -> Any:
    async with aiohttp.ClientSession() as http, http.request(method, url, json=body) as reply:
        reply.raise_for_status()
        return await reply.json()


def latest_conversations(log: Sequence[Mapping[str, Any]]) -> dict[str, Conversation]:
    """Per run (by the marker in its input), the most advanced request the model received."""
    best: dict[str, Conversation] = {}
    for entry in log:
        parse = _PARSERS.get(str(entry.get("path")))
        body = entry.get("body")
        if parse is None or not isinstance(body, dict):
            continue
        conv = parse(body)
        found = _MARKER.search(conv.last_user_text)
        if found is None:
            continue
        run_id = found.group(1)
        if run_id not in best or conv.assistant_turns >= best[run_id].assistant_turns:
            best[run_id] = conv
    return best


UNDER_WAY = frozenset({CallState.EXECUTING, CallState.UNKNOWN, CallState.RECONCILING})
"""A call whose write may be out there and that callgate is still settling."""
IN_FLIGHT = UNDER_WAY | {CallState.UNRESOLVED}


def reply_facts(events: Sequence[Any]) -> tuple[dict[str, tuple[str, ...]], int | None]:
    """Replay the log: each reply id admitted → the status the run had before it (the one
    before the reply's own transition), per admission; the turn the latest reply opened."""
    statuses: list[str | None] = [None, None]
    replies: dict[str, tuple[str, ...]] = {}
    turn: int | None = None
    for event in events:
        if event.type == "run.transition":
            statuses = [statuses[1], str(event.data.get("to"))]
        elif event.type == "run.reply":
            reply_id = str(event.data.get("reply_id"))
            replies[reply_id] = (*replies.get(reply_id, ()), str(statuses[0]))
            turn = int(event.data.get("turn") or 0)
    return replies, turn


def people_facts(events: Sequence[Any]) -> PeopleFacts:
    """Replay the log: where each call stood when the run was cancelled, every resolution and
    refused cancel, and the replies admitted."""
    at: dict[str, str] = {}
    cancel_turn: int | None = None
    in_flight: tuple[str, ...] = ()
    refused = 0
    resolutions: dict[str, tuple[str, ...]] = {}
    for event in events:
        data = event.data
        if event.type == "call.transition" and cancel_turn is None:
            at[str(data.get("call_id"))] = str(data.get("to"))
        elif event.type == "run.transition" and data.get("to") == "cancelled":
            cancel_turn = int(data.get("turn") or 0)
            in_flight = tuple(c for c, state in at.items() if state in IN_FLIGHT)
        elif event.type == "control.refused":
            refused += 1
        elif event.type == "call.resolved":
            call_id = str(data.get("call_id"))
            resolutions[call_id] = (*resolutions.get(call_id, ()), str(data.get("outcome")))
    return PeopleFacts(cancel_turn, in_flight, refused, resolutions, *reply_facts(events))


def terminal_transitions(events: Sequence[Any]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for event in events:
        if event.type == "call.transition" and event.data.get("to") in CALL_TERMINAL:
            counts[str(event.data.get("call_id"))] += 1
    return dict(counts)


async def run_facts(
    ledger: Ledger, plan: PlannedRun, conv: Conversation | None, sent: Sequence[SentReply] = ()
) -> RunFacts:
    run = await ledger.get_run(plan.run_id)
    calls: list[CallRecord] = []
    outcomes: dict[str, int] = {}
    people = PeopleFacts()
    if run is not None:
        calls = await ledger.run_calls(run.run_id, run.turn)
        events = await ledger.events(run.run_id)
        outcomes, people = terminal_transitions(events), people_facts(events)
    received: dict[str, tuple[str, ...]] = {}
    for result in conv.results if conv is not None else ():
        received[result.call_id] = (*received.get(result.call_id, ()), result.content)
    turns = conv.assistant_turns if conv is not None else 0
    return RunFacts(plan, run, tuple(calls), outcomes, received, turns, people, tuple(sent))


async def dead_letter_count(redis: RedisClient, keys: Keys) -> int:
    return sum([int(await redis.xlen(keys.dead_letter(p))) for p in range(keys.partitions)])


async def collect(
    ledger: Ledger,
    plans: Sequence[PlannedRun],
    booking_url: str | None,
    model_url: str,
    sent: Mapping[str, Sequence[SentReply]] | None = None,
) -> Facts:
    log: list[dict[str, Any]] = await http_json("GET", f"{model_url}/_log")
    conversations = latest_conversations(log)
    sent = sent or {}
    runs = [
        await run_facts(ledger, p, conversations.get(p.run_id), sent.get(p.run_id, ()))
        for p in plans
    ]
    reserve: dict[str, Any] = {}
    if booking_url is not None:
        reserve = (await http_json("GET", f"{booking_url}/_stats"))["reserve"]
    return Facts(
        runs=tuple(runs),
        reserve_requests=reserve.get("requests_by_operation", {}),
        reservations=reserve.get("created_by_operation", {}),
        dead_letters=await dead_letter_count(ledger.redis, ledger.keys),
        model_requests=len(log),
        model_drops=sum(1 for e in log if e.get("dropped")),
        stranded=tuple(call.line() for call in (await find_stranded(ledger)).calls),
    )
