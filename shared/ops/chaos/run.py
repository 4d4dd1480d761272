"""`callgate chaos --runs N --seed S`: the whole system under random real faults.

While a seeded mix of runs is submitted (`workload`), the injector SIGKILLs worker processes
of every kind at random moments and restarts Redis once (with ``--failover``, under Sentinel,
or ``--cluster``, on a Redis Cluster, SIGKILLs a Redis master instead, and a replica is
promoted: `callgate.ops.chaos.ha`); the booking service commits and then
drops the answer for a share of reservations; the scripted model drops some streams
mid-response.  The approver decides the approvals, except those a run's plan leaves to
expire; the run's user cancels some runs, and a resolver settles the writes some runs' plans
leave unresolved (`people`).  Kills go on until every run has settled (or for at most
`KILL_TAIL_S` after the last submission, and until every kind was killed once); then every run
must settle, and the invariants are checked (`invariants`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from callgate.ops.chaos.facts import expired_calls
from callgate.ops.chaos.ha import ClusterMaster, FailsOver
from callgate.ops.chaos.injector import Injector
from callgate.ops.chaos.report import figures, people_figures
from callgate.ops.chaos.session import Progress, Session, system_spec
from callgate.ops.chaos.workload import plan_runs
from callgate.ops.embedded_cluster import EmbeddedCluster
from callgate.ops.embedded_sentinel import EmbeddedSentinel
from callgate.ops.system import LocalSystem

TRAVEL_LATENCY_S = 0.3
"""The travel reads take this long, like real services, so kills find calls in flight."""
CLUSTER_PARTITIONS = 3
"""Partitions on a cluster: one per master (`EmbeddedCluster.spread`)."""
KILL_TAIL_S = 10.0
"""Kills go on until every run settled, at most this long after the last submission."""


@dataclass(frozen=True)
class ChaosOptions:
    runs: int = 200
    seed: int = 1
    rate: float = 10.0
    """Runs submitted per second."""
    kill_every_s: float = 0.75
    """Mean time between SIGKILLs."""
    replicas: int = 2
    """Replicas of every worker kind: a deployment that must survive a dead process runs two
    of each, and recovery measures the live one taking over, not the dead one's restart."""
    booking_drop: float = 0.1
    """Share of reservations the booking service commits and then drops the answer of."""
    redis_restart: bool = True
    """One Redis fault halfway through the submissions: a restart, or the master's death."""
    failover: bool = False
    """Redis under Sentinel (a master, two replicas): the fault kills the master."""
    cluster: bool = False
    """A Redis Cluster (three masters, a replica each; three partitions): the fault kills the
    master serving the most of the deployment's slots."""
    durability: str = "replica"
    """``CALLGATE_WRITE_DURABILITY`` with ``failover`` or ``cluster``: ``none`` shows what a
    failover can lose."""
    settle_timeout_s: float = 300.0


def replicas(options: ChaosOptions) -> dict[str, int]:
    many = max(1, options.replicas)
    return dict.fromkeys(("ingress", "model_turn", "validator", "executor", "reconciler"), many)


async def _submit_all(session: Session, injector: Injector, options: ChaosOptions) -> None:
    """Submit at the planned rate, each planned cancel and reply on its way right after its run;
    restart Redis (in the background) halfway through."""
    restart: asyncio.Task[None] | None = None
    cancels: list[asyncio.Task[None]] = []
    for i, plan in enumerate(session.plans):
        if options.redis_restart and i == len(session.plans) // 2:
            restart = asyncio.create_task(injector.redis_fault())
        await session.submit(plan)
        if plan.cancel != "no":
            cancels.append(asyncio.create_task(session.people.cancel(plan)))
        session.replier.start(plan)
        if i % 50 == 49:
            session.progress(f"submitted {i + 1}/{len(session.plans)}")
        await asyncio.sleep(1 / options.rate)
    if restart is not None:
        await restart
    await asyncio.gather(*cancels)


async def _under_faults(session: Session, injector: Injector, options: ChaosOptions) -> None:
    """Submit everything while killing; then stop the kills and let every run settle."""
    run_ids = [p.run_id for p in session.plans]
    reserve_fault = {"mode": "commit_then_drop", "probability": options.booking_drop,
                     "seed": options.seed}  # fmt: skip
    await session.booking_faults({"reserve": reserve_fault})
    await session.travel_latency(TRAVEL_LATENCY_S)
    approver = asyncio.create_task(session.approver.run())
    people = asyncio.create_task(session.people.run())
    stop_kills = asyncio.Event()
    killing = asyncio.create_task(injector.kill_until(stop_kills))
    await _submit_all(session, injector, options)
    await session.wait_settled(run_ids, KILL_TAIL_S)
    stop_kills.set()
    await killing
    session.progress(f"faults over ({len(injector.faults.kills)} kills); waiting for every run")
    await session.wait_settled(run_ids, options.settle_timeout_s)
    session.approver.stop()
    session.people.stop()
    await session.replier.stop()
    await asyncio.gather(approver, people)
    await injector.settle_trackers()


async def chaos_session(
    system: LocalSystem, options: ChaosOptions, progress: Progress, ha: FailsOver | None = None
) -> dict[str, Any]:
    """One random-fault session on a started system; its figures."""
    started = time.monotonic()
    session = Session(system, plan_runs(options.runs, options.seed), progress)
    injector = Injector(system, session.redis, options.seed, kill_every_s=options.kill_every_s,
                        progress=progress, ha=ha)  # fmt: skip
    try:
        await session.wait_ready()
        await _under_faults(session, injector, options)
        facts = await session.facts()
    finally:
        await session.close()
    extra = {
        "seed": options.seed,
        "redis_restarts": injector.faults.redis_restarts,
        "redis_down_s": injector.faults.redis_down_s,
        **_failover_figures(injector, options),
        "approvals": {"approved": session.approver.stats.approved,
                      "denied": session.approver.stats.denied,
                      "expired": expired_calls(facts)},
        "people": people_figures(facts, session.people.stats),
        "elapsed_s": round(time.monotonic() - started, 1),
    }  # fmt: skip
    return figures(facts, injector.faults.kills, extra)


def run_chaos(options: ChaosOptions, progress: Progress) -> dict[str, Any]:
    """Start the system (under Sentinel with ``failover``, on a cluster with ``cluster``), run
    the session, stop everything; the figures."""
    store = _ha_store(options, progress)
    try:
        env, url = _ha_started(store, options) if store is not None else (None, None)
        system = LocalSystem(system_spec(replicas(options), env, url), progress=progress)
        try:
            system.start()
            ha = (
                ClusterMaster(store, system.settings)
                if isinstance(store, EmbeddedCluster)
                else store
            )
            return asyncio.run(chaos_session(system, options, progress, ha))
        finally:
            system.stop()
    finally:
        if store is not None:
            store.stop()


def _ha_store(
    options: ChaosOptions, progress: Progress
) -> EmbeddedSentinel | EmbeddedCluster | None:
    if options.cluster:
        progress("starting a Redis Cluster: three masters, a replica each")
        return EmbeddedCluster()
    if options.failover:
        progress("starting Redis under Sentinel: a master, two replicas, three sentinels")
        return EmbeddedSentinel(replicas=2)
    return None


def _ha_started(
    store: EmbeddedSentinel | EmbeddedCluster, options: ChaosOptions
) -> tuple[dict[str, str], str]:
    """Start ``store``; the workers' environment for it, and its URL."""
    env = {"CALLGATE_WRITE_DURABILITY": options.durability}
    if isinstance(store, EmbeddedCluster):
        env["CALLGATE_PARTITIONS"] = str(CLUSTER_PARTITIONS)
        store.start().spread(CLUSTER_PARTITIONS)
        return env, store.cluster_url
    return env, store.start().url


def _failover_figures(injector: Injector, options: ChaosOptions) -> dict[str, Any]:
    if not (options.failover or options.cluster):
        return {}
    faults = injector.faults
    return {
        "failovers": faults.failovers,
        "promoted_s": faults.promoted_s,
        "durability": options.durability,
    }
