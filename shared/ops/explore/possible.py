"""Every event possible in the current state, progress first (`callgate.ops.explore.events`).

Progress: a fetched message's first delivery, a redelivery of one left pending (as XAUTOCLAIM
hands a dead consumer's messages on), a run's start job, the service coming back, the sweeps
when something is due, and the clock moving to the next timer when nothing else can happen.
Injected: a worker dying at a boundary while it handles a message, a duplicated message, a
repeated start job, the service going down, a small clock step, and people's actions
(`callgate.ops.explore.people`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from callgate.ops.chaos.workload import PlannedRun
from callgate.ops.explore.events import BOUNDARIES, Entry, Event, fetch, hand, pending_ids
from callgate.ops.explore.people import People
from callgate.ops.explore.world import Crashed, World
from callgate.sweeps import sweep_approvals, sweep_deadlines

SMALL_STEP_MS = 1_000
INGRESS_BOUNDARY = "ingress.after_create"
RECENT = 3
"""Messages a duplicate may copy: the last few handled."""


@dataclass
class Possible:
    """What the episode has seen so far that decides what may happen."""

    world: World
    plans: Sequence[PlannedRun]
    specs: dict[str, dict[str, Any]]
    entries: list[Entry] = field(default_factory=list)
    started: set[str] = field(default_factory=set)
    duplicated: set[str] = field(default_factory=set)
    people: People = field(init=False)

    def __post_init__(self) -> None:
        self.people = People(self.world, self.plans)

    async def events(self, *, faults: bool) -> list[Event]:
        """The events possible now, progress first (with ``faults``, everything)."""
        await fetch(self.world, self.entries)
        pending = await pending_ids(self.world)
        live = [e for e in self.entries if (e.stream, e.message_id) in pending]
        progress = [*self._deliveries(live), *self._starts(), *await self._sweeps()]
        if not faults:
            return progress or await self.people.resolutions() or await self._next_timer()
        injected = [
            *self._crashes(live),
            *self._duplicates(),
            *self._restarts(),
            *self._service(),
            *await self._next_timer(),
            *await self.people.events(),
        ]
        return [*progress, *injected]

    # -- progress --------------------------------------------------------------------------

    def _deliveries(self, live: list[Entry]) -> list[Event]:
        found = []
        for entry in sorted(live, key=lambda e: e.handed > 0):
            verb = "redeliver" if entry.handed else "deliver"
            found.append(
                _about(
                    entry,
                    f"{verb}:{entry.group}",
                    f"{verb} {entry.label} to {entry.group}",
                    _handing(self.world, entry, None),
                )
            )
        return found

    def _starts(self) -> list[Event]:
        found = []
        for plan in self.plans:
            if plan.run_id not in self.started:
                found.append(
                    Event(
                        "start", f"start run {plan.run_id}", self._start(plan), run_id=plan.run_id
                    )
                )
        if self.world.store.down:
            found.append(Event("service_up", "the service comes back", self._set_down(False)))
        return found

    async def _sweeps(self) -> list[Event]:
        world, now = self.world, self.world.now_ms
        found = []
        if await _due(world, world.keys.pending_approvals(0), now):
            found.append(
                Event(
                    "sweep_approvals",
                    "the ingress sweeps expired approvals",
                    _swept(sweep_approvals, world),
                )
            )
        if await _due(world, world.keys.deadlines(0), now):
            found.append(
                Event(
                    "sweep_deadlines",
                    "the ingress sweeps run deadlines",
                    _swept(sweep_deadlines, world),
                )
            )
        return found

    async def _next_timer(self) -> list[Event]:
        """Time moves on to the next approval expiry or run deadline (in the drain, only when
        nothing else can happen)."""
        world, now = self.world, self.world.now_ms
        found = []
        timers = [
            await _first_after(world, world.keys.pending_approvals(0), now),
            await _first_after(world, world.keys.deadlines(0), now),
        ]
        due = min((t for t in timers if t is not None), default=None)
        if due is not None:
            found.append(
                Event(
                    "tick",
                    f"the clock moves {(due - now) / 1000:g} s on to the next timer",
                    self._tick(due + 1),
                )
            )
        return found

    # -- injected --------------------------------------------------------------------------

    def _crashes(self, live: list[Entry]) -> list[Event]:
        return [
            _about(
                entry,
                f"crash:{entry.group}",
                f"{entry.group} dies while handling {entry.label}",
                self._crash(entry),
                fault=True,
            )
            for entry in live
        ]

    def _duplicates(self) -> list[Event]:
        """A copy of one of the last few messages handled (each copied once)."""
        recent = [e for e in self.entries if e.handed][-RECENT:]
        return [
            _about(
                entry,
                "duplicate",
                f"{entry.label} is delivered twice (duplicated)",
                self._duplicate(entry),
                fault=True,
            )
            for entry in recent
            if entry.message_id not in self.duplicated
        ]

    def _restarts(self) -> list[Event]:
        """A start job delivered again (arq is at least once), or the ingress dying just
        after it created the run (the job is then delivered again by a restart event)."""
        found = []
        for plan in self.plans:
            if plan.run_id in self.started:
                found.append(
                    Event(
                        "restart",
                        f"the start job of {plan.run_id} is delivered again",
                        self._start(plan),
                        run_id=plan.run_id,
                        fault=True,
                    )
                )
            else:
                found.append(
                    Event(
                        "crash:ingress",
                        f"the ingress dies as it starts {plan.run_id}",
                        self._start(plan, INGRESS_BOUNDARY),
                        run_id=plan.run_id,
                        fault=True,
                    )
                )
        return found

    def _service(self) -> list[Event]:
        found = [
            Event(
                "tick",
                "the clock moves 1 s on",
                self._tick(self.world.now_ms + SMALL_STEP_MS),
                fault=True,
            )
        ]
        if not self.world.store.down:
            found.append(
                Event("service_down", "the service goes down", self._set_down(True), fault=True)
            )
        return found

    # -- acts ------------------------------------------------------------------------------

    def _start(
        self, plan: PlannedRun, boundary: str | None = None
    ) -> Callable[[], Awaitable[str | None]]:
        async def act() -> str | None:
            self.started.add(plan.run_id)
            self.world.armed = boundary
            try:
                await self.world.start(plan.run_id, self.specs[plan.run_id])
            except Crashed:
                return f"the ingress died at {boundary}"
            except Exception as exc:  # a refused start job fails as arq would record it
                return f"refused: {type(exc).__name__}"
            finally:
                self.world.armed = None
            return None

        return act

    def _crash(self, entry: Entry) -> Callable[[], Awaitable[str | None]]:
        async def act() -> str | None:
            boundary = self.world.choices.answer("boundary", BOUNDARIES[entry.group])
            return await hand(self.world, entry, boundary) or f"{boundary} not reached"

        return act

    def _duplicate(self, entry: Entry) -> Callable[[], Awaitable[str | None]]:
        async def act() -> str | None:
            self.duplicated.add(entry.message_id)
            await self.world.redis.xadd(entry.stream, {"d": entry.raw or b""})
            return None

        return act

    def _tick(self, to_ms: int) -> Callable[[], Awaitable[str | None]]:
        async def act() -> str | None:
            self.world.now_ms = to_ms
            return None

        return act

    def _set_down(self, down: bool) -> Callable[[], Awaitable[str | None]]:
        async def act() -> str | None:
            self.world.store.down = down
            return None

        return act


def _about(
    entry: Entry,
    kind: str,
    label: str,
    act: Callable[[], Awaitable[str | None]],
    *,
    fault: bool = False,
) -> Event:
    return Event(kind, label, act, entry.run_id, entry.call_id, fault)


def _handing(
    world: World, entry: Entry, boundary: str | None
) -> Callable[[], Awaitable[str | None]]:
    async def act() -> str | None:
        return await hand(world, entry, boundary)

    return act


def _swept(
    sweep: Callable[[dict[str, Any]], Awaitable[int]], world: World
) -> Callable[[], Awaitable[str | None]]:
    async def act() -> str | None:
        return f"{await sweep({'runtime': world.ingress})} found"

    return act


async def _due(world: World, index: str, now: int) -> bool:
    return bool(await world.redis.zcount(index, "-inf", now))


async def _first_after(world: World, index: str, now: int) -> int | None:
    found = await world.redis.zrangebyscore(
        index, f"({now}", "+inf", start=0, num=1, withscores=True
    )
    return int(found[0][1]) if found else None
