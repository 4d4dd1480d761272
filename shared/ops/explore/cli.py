"""`callgate explore`: every interleaving the ledger can meet, explored deterministically.

    callgate explore [--seconds N | --steps N] [--seed S] [--out FILE] [--json]
    callgate explore --replay FILE

Runs every worker's handler in this one process against a private redis-server and the real
ledger steps, choosing each next event (a delivery, a redelivery, a duplicate, a crash at a
boundary, time passing, a person's action, a tool's or the model's answer) from a seed, and
checks the invariants after every event (`callgate.ops.explore.checks`).  A violation is shrunk
to a short schedule, printed as numbered steps, and written to ``--out`` for ``--replay``.
Exit codes: 0 no violation (a replay: it no longer breaks), 1 an invariant broke, 2 bad usage
(e.g. not a replay file).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from callgate.ops import exits
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.explore.episode import Outcome
from callgate.ops.explore.session import (
    POSSIBLE_TRIPLES,
    Report,
    explore,
    read_replay,
    replay,
    write_replay,
)
from callgate.ops.explore.world import World, new_home, quiet_logs
from callgate.ops.stack import print_figures, progress_to_stderr, sigterm_as_interrupt

DEFAULT_OUT = Path("explore-failure.json")


async def _explore(args: argparse.Namespace, redis_url: str) -> Report:
    world = World(redis_url, new_home())
    try:
        seconds = None if args.steps is not None else args.seconds
        return await explore(
            world, seed=args.seed, seconds=seconds, events=args.steps, progress=progress_to_stderr
        )
    finally:
        await world.close()


async def _replay(seed: int, choices: list[str], redis_url: str) -> Outcome:
    world = World(redis_url, new_home())
    try:
        return await replay(world, seed, choices)
    finally:
        await world.close()


def summary(report: Report) -> dict[str, Any]:
    found = report.found
    return {
        "seed": report.seed,
        "episodes": report.episodes,
        "events": report.events,
        "seconds": round(report.seconds, 1),
        "events_per_s": round(report.events_per_s),
        "triples": len(report.triples),
        "possible_triples": POSSIBLE_TRIPLES,
        "violations": 0 if found is None else 1,
        "found": None
        if found is None
        else {
            **found.replay_document(),
            "seconds_to_find": round(found.seconds_to_find, 1),
            "events_to_find": found.events_to_find,
            "steps_before_shrinking": len(found.original.steps),
        },
    }


def render(fig: dict[str, Any], out: Path) -> str:
    lines = [
        f"explored {fig['events']:,} events in {fig['seconds']:g} s "
        f"({fig['events_per_s']:,} events/s), {fig['episodes']:,} episodes, seed {fig['seed']}",
        f"coverage: {fig['triples']:,} of {fig['possible_triples']:,} "
        "(run state, call state, event kind) triples",
        f"violations: {fig['violations']}",
    ]
    found = fig["found"]
    if found is not None:
        lines += [
            f"broken: {found['invariant']} — {'; '.join(found['details'][:3])}",
            f"found after {found['events_to_find']:,} events "
            f"({found['seconds_to_find']:g} s); shrunk from "
            f"{found['steps_before_shrinking']} to {len(found['steps'])} events:",
            *found["steps"],
            f"replay: callgate explore --replay {out}",
        ]
    return "\n".join(lines)


def cmd_explore(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    with quiet_logs():
        return _cmd_explore(args)


def _cmd_explore(args: argparse.Namespace) -> int:
    if args.replay is not None:
        return _cmd_replay(Path(args.replay))
    with EmbeddedRedis() as redis:
        report = asyncio.run(_explore(args, redis.url))
    fig = summary(report)
    out = Path(args.out)
    if report.found is not None:
        write_replay(report.found, out)
    print_figures(fig, render(fig, out), as_json=args.json)
    return exits.OK if report.found is None else exits.ENDED


def _cmd_replay(path: Path) -> int:
    try:
        seed, choices, invariant = read_replay(path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exits.USAGE
    with EmbeddedRedis() as redis:
        outcome = asyncio.run(_replay(seed, choices, redis.url))
    print("\n".join(s.line(i) for i, s in enumerate(outcome.steps, 1)))
    if outcome.broken is None:
        print(f"no longer broken: {invariant} holds on this schedule")
        return exits.OK
    print(f"broken: {outcome.broken} — {'; '.join(outcome.violation[outcome.broken][:3])}")
    return exits.ENDED


def add_command(sub: Any) -> None:
    """``callgate explore`` (see the module docstring)."""
    cmd = sub.add_parser("explore", help="explore the ledger's schedules; check invariants")
    budget = cmd.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=60.0, help="time budget (default 60)")
    budget.add_argument("--steps", type=int, default=None, help="event budget instead")
    cmd.add_argument("--seed", type=int, default=1)
    cmd.add_argument("--replay", metavar="FILE", help="replay a schedule a violation wrote")
    cmd.add_argument(
        "--out",
        default=str(DEFAULT_OUT),
        help=f"where a violation's schedule is written (default {DEFAULT_OUT})",
    )
    cmd.add_argument("--json", action="store_true", help="print the figures as JSON")
    cmd.set_defaults(handler=cmd_explore)
