"""Faults at random moments: SIGKILL a worker process of every kind in turn, restart Redis once.

The supervisor restarts whatever dies; each kill is tracked (`callgate.ops.chaos.recovery`) until
everything the dead process held is settled or taken up by a live worker.  The kind killed
next, the replica order and the gap until the next kill come from one generator seeded by the
session's seed.
A process is mostly idle between messages, so a kill waits up to `BUSY_WAIT_S` for a replica
that holds work (in-flight messages, or an arq job) and kills that one, else an idle one:
a kill that lands on nothing tests a restart, not a recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from callgate.config import Settings
from callgate.connect import RedisClient
from callgate.keys import Keys
from callgate.ops.chaos.common import REDIS_AWAY, pause, text
from callgate.ops.chaos.ha import FailsOver
from callgate.ops.chaos.recovery import Kill, held_by, track
from callgate.ops.system import LocalSystem
from callgate.streams.service import consumer_name

DEATH_WAIT_S = 5.0
BUSY_WAIT_S = 1.0
"""How long a kill waits for a replica to hold work before it hits an idle one."""
BUSY_POLL_S = 0.02
REDIS_DOWN_S = 1.0
FAILOVER_WAIT_S = 45.0
"""How long a killed master's replica may take to be promoted: a few seconds on an idle
machine, far longer on a loaded one; past it the session stops with one line (TimeoutError)."""
RECOVERY_LIMIT_S = 180.0
"""A kill whose work is not settled by then counts as unrecovered."""


@dataclass
class Faults:
    """Everything the injector did."""

    kills: list[Kill] = field(default_factory=list)
    redis_restarts: int = 0
    redis_down_s: float = 0.0
    failovers: int = 0
    promoted_s: float = 0.0
    """From the master's SIGKILL until a replica serves as master."""
    trackers: list[asyncio.Task[None]] = field(default_factory=list)

    def kills_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kill in self.kills:
            counts[kill.kind] = counts.get(kill.kind, 0) + 1
        return counts


class Injector:
    def __init__(
        self,
        system: LocalSystem,
        redis: RedisClient,
        seed: int,
        *,
        kill_every_s: float,
        progress: Callable[[str], None],
        ha: FailsOver | None = None,
    ) -> None:
        self.system = system
        self.redis = redis
        self.settings: Settings = system.settings
        self.rng = random.Random(f"chaos-faults-{seed}")
        self.kill_every_s = kill_every_s
        self.progress = progress
        self.faults = Faults()
        self.ha = ha
        """Set under Sentinel or on a cluster: the Redis fault is then a master's death, not a
        restart."""
        self._order: list[str] = []

    def _next_kind(self) -> str:
        """Kinds in a fresh shuffled order each round, so every kind is killed as often."""
        if not self._order:
            self._order = sorted(k for k, names in self.system.workers.items() if names)
            self.rng.shuffle(self._order)
        return self._order.pop()

    def _unrecovered(self, kind: str) -> frozenset[str]:
        """Work earlier kills of ``kind`` held that no live worker has taken up yet."""
        return frozenset(
            h for k in self.faults.kills if k.kind == kind and k.recovery_s is None for h in k.held
        )

    async def _victim(self, kind: str, earlier: frozenset[str]) -> tuple[str, int] | None:
        """A replica of ``kind`` to kill: the first seen holding work within `BUSY_WAIT_S`
        (recovery is measured on those), else a random one; None if none may die now.

        With two or more replicas, one dies only while another serves: a kill then measures
        a live peer taking the work over, which is what a deployment of two relies on, rather
        than how fast the supervisor restarts a process (kills 0.75 s apart used to leave both
        replicas down, restarting with back-off)."""
        names = list(self.system.workers[kind])
        self.rng.shuffle(names)
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            pids = self.system.supervisor.pids()
            up = [(name, pids[name]) for name in names if name in pids]
            if len(names) > 1:
                up = await self._with_serving_peer(kind, up)
            for name, pid in up:
                with contextlib.suppress(*REDIS_AWAY):
                    if set(await held_by(self.redis, self.settings, kind, pid)) - earlier:
                        return name, pid
            if time.monotonic() >= deadline:
                return up[0] if up else None
            await asyncio.sleep(BUSY_POLL_S)

    async def _with_serving_peer(
        self, kind: str, up: list[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Those of ``up`` another of which has announced that it serves."""
        key = Keys(self.settings.key_prefix).consumers(kind)
        try:
            announced = {text(m) for m in await self.redis.zrange(key, 0, -1)}
        except REDIS_AWAY:
            return []
        serving = {pid for _, pid in up if consumer_name(kind, pid) in announced}
        return [(name, pid) for name, pid in up if serving - {pid}]

    async def kill_one(self) -> Kill | None:
        """SIGKILL one replica of the next kind; None if all were down (restarting)."""
        kind = self._next_kind()
        earlier = self._unrecovered(kind)
        victim = await self._victim(kind, earlier)
        if victim is None:
            return None
        name, pid = victim
        supervisor = self.system.supervisor
        supervisor.kill(name)
        kill = Kill(kind, name, pid, time.monotonic())
        deadline = time.monotonic() + DEATH_WAIT_S
        while supervisor.pids().get(name) == pid and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.faults.kills.append(kill)
        task = asyncio.create_task(
            track(self.redis, self.settings, kill, RECOVERY_LIMIT_S, earlier)
        )
        self.faults.trackers.append(task)
        return kill

    async def kill_until(self, stop: asyncio.Event) -> None:
        """Kill at random intervals until ``stop`` is set and every kind was killed once."""
        kinds = {k for k, names in self.system.workers.items() if names}
        while True:
            gap = self.kill_every_s * self.rng.uniform(0.5, 1.5)
            if stop.is_set():
                if kinds <= set(self.faults.kills_by_kind()):
                    return
                await asyncio.sleep(gap)
            elif await pause(stop, gap) and kinds <= set(self.faults.kills_by_kind()):
                return
            await self.kill_one()

    async def redis_fault(self) -> None:
        """The session's one Redis fault: a failover under Sentinel or on a cluster, else a
        restart."""
        if self.ha is not None:
            await self.fail_over(self.ha)
        else:
            await self.restart_redis()

    async def fail_over(self, ha: FailsOver) -> None:
        """SIGKILL a Redis master while runs flow; its replica is promoted (by the sentinels,
        or the cluster), and the workers follow (`callgate.connect`).  Whatever replication
        had not carried is gone: what the write durability setting is for.  The killed node
        is then started again, as an orchestrator would, and rejoins as a replica."""
        master = await asyncio.to_thread(ha.master)
        self.progress(f"killing the Redis master (:{master.port})")
        started = time.monotonic()
        await asyncio.to_thread(master.stop, kill=True)
        await asyncio.to_thread(ha.wait_for_failover, master, FAILOVER_WAIT_S)
        self.faults.promoted_s = round(time.monotonic() - started, 3)
        self.faults.failovers += 1
        self.progress(f"a replica was promoted after {self.faults.promoted_s:.1f}s")
        await asyncio.to_thread(ha.rejoin, master, FAILOVER_WAIT_S)
        self.progress(f"the killed master serves as a replica {time.monotonic() - started:.1f}s on")

    async def restart_redis(self) -> None:
        """Stop Redis, leave it down `REDIS_DOWN_S` (as a real restart replaying its AOF
        would), start it again on the same port (AOF on: nothing is lost)."""
        server = self.system.redis
        if server is None:
            raise RuntimeError("the chaos session needs its own Redis to restart it")
        self.progress("restarting Redis")
        started = time.monotonic()
        await asyncio.to_thread(server.stop)
        await asyncio.sleep(REDIS_DOWN_S)
        await asyncio.to_thread(server.start)
        self.faults.redis_down_s = round(time.monotonic() - started, 3)
        self.faults.redis_restarts += 1
        self.progress(f"Redis back after {self.faults.redis_down_s:.1f}s")

    async def settle_trackers(self) -> None:
        await asyncio.gather(*self.faults.trackers, return_exceptions=True)
