"""What may happen next, and making it happen: one `Event` per possibility in the current
state, listed in a fixed order so that a schedule (a list of choices) replays exactly.

Progress comes first in every list — a message's first delivery, a redelivery of one left
pending (what XAUTOCLAIM does for a dead consumer), a run's start, time passing when something
waits for it, the sweeps — and the faults after it: a worker crashing at a named boundary while
it handles a message, a duplicated message, a repeated start job, the service going down, and
people's actions (also stale or misdirected).  Which answer a tool or the model gives is
chosen when it is asked (`callgate.ops.explore.store`, `callgate.ops.explore.model`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from callgate.envelopes import decode
from callgate.errors import CallgateError
from callgate.ops.explore.world import Crashed, World
from callgate.streams.delivery import Message

BOUNDARIES: dict[str, tuple[str, ...]] = {
    "model_turn": ("model_turn.after_request", "model_turn.after_outbox", "model_turn.before_ack"),
    "validator": ("validator.mid_approval", "validator.before_ack"),
    "executor": (
        "executor.after_take",
        "executor.after_request",
        "executor.after_persist",
        "executor.before_ack",
    ),
    "reconciler": ("reconciler.after_claim", "reconciler.after_check", "reconciler.before_ack"),
}
"""Where each worker can die while it handles a message (`callgate.crashpoints`)."""
READ_BATCH = 1_000
PEOPLE_KINDS = (
    "approve",
    "deny",
    "approve_other_arguments",
    "approve_on_another_run",
    "resolve",
    "cancel",
)
KINDS: tuple[str, ...] = (
    *(f"{verb}:{group}" for verb in ("deliver", "redeliver", "crash") for group in BOUNDARIES),
    "start",
    "restart",
    "crash:ingress",
    "duplicate",
    "service_up",
    "service_down",
    "tick",
    "sweep_approvals",
    "sweep_deadlines",
    *(f"person:{kind}" for kind in PEOPLE_KINDS),
)
"""Every kind of event, as coverage counts them."""


@dataclass
class Entry:
    """A stream entry a worker group has fetched: handed to its handler ``handed`` times."""

    group: str
    stream: str
    message_id: str
    raw: bytes | None
    label: str
    run_id: str | None = None
    call_id: str | None = None
    handed: int = 0


@dataclass(frozen=True)
class Event:
    """One thing that may happen now: ``kind`` for coverage, ``label`` for people."""

    kind: str
    label: str
    act: Callable[[], Awaitable[str | None]]
    """Makes it happen; returns what it chose on the way, if anything."""
    run_id: str | None = None
    call_id: str | None = None
    fault: bool = False


def describe(raw: bytes | None) -> tuple[str, str | None, str | None]:
    """A message as a person reads it, and the run and call it names."""
    try:
        envelope = decode(raw or b"")
    except CallgateError:
        return "an undecodable message", None, None
    call_id = getattr(envelope, "call_id", None)
    where = f"{envelope.run_id} turn {envelope.turn}" + (f" {call_id}" if call_id else "")
    return f"{type(envelope).__name__} ({where})", envelope.run_id, call_id


async def fetch(world: World, entries: list[Entry]) -> None:
    """Move every new stream entry into its group's pending list (as a worker's read does).
    Each gets a label of its own: a second message that reads the same (another decision on
    the same run and turn, a duplicate) is ``#2``, so a replay picks the very same one."""
    seen = Counter(_base(e.label) for e in entries)
    for name, worker in world.workers.items():
        streams = dict.fromkeys(worker.accepts, ">")
        replies = await world.redis.xreadgroup(name, f"{name}-x", streams, count=READ_BATCH)
        for stream, items in replies or []:
            for message_id, fields in items:
                raw = fields.get(b"d")
                label, run_id, call_id = describe(raw)
                seen[label] += 1
                if seen[label] > 1:
                    label = f"{label} #{seen[label]}"
                entries.append(
                    Entry(name, _text(stream), _text(message_id), raw, label, run_id, call_id)
                )


def _base(label: str) -> str:
    return label.rsplit(" #", 1)[0]


async def pending_ids(world: World) -> set[tuple[str, str]]:
    """(stream, id) of every entry fetched and not acked, across groups."""
    found: set[tuple[str, str]] = set()
    for name, worker in world.workers.items():
        for stream in worker.accepts:
            for item in await world.redis.xpending_range(stream, name, "-", "+", READ_BATCH):
                found.add((stream, _text(item["message_id"])))
    return found


async def hand(world: World, entry: Entry, boundary: str | None) -> str | None:
    """Hand ``entry`` to its worker's runner, dying at ``boundary`` if it gets there."""
    worker = world.workers[entry.group]
    entry.handed += 1
    if entry.handed > 1:
        await world.redis.xclaim(
            entry.stream, entry.group, f"{entry.group}-x", 0, [entry.message_id]
        )
    world.armed = boundary
    try:
        message = Message(entry.stream, entry.message_id, entry.raw, entry.handed)
        await worker.runner.process(message, worker.acker)
    except Crashed:
        await world.crashed(entry.group)
        return f"{entry.group} died at {boundary}"
    finally:
        world.armed = None
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
