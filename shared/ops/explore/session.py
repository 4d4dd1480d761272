"""A session of the explorer: episodes one after another, each from its own seed, until the
budget (seconds or events) is spent or an invariant breaks; then the failing schedule is
shrunk to a short one that breaks the same invariant, and written as a replay file.

Shrinking works on the choice list (`callgate.ops.explore.choices`): drop chunks of it, halving
the chunk until single choices, keeping every candidate that still breaks the same invariant
in no more events (delta debugging, as Hypothesis shrinks its choice sequences).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from callgate.ops.explore.choices import EVENT, Choices
from callgate.ops.explore.episode import Outcome, run_episode
from callgate.ops.explore.events import KINDS
from callgate.ops.explore.world import World
from callgate.states import CallState, RunState

REPLAY_VERSION = 1
SHRINK_S = 30.0
PROGRESS_EVERY_S = 5.0
POSSIBLE_TRIPLES = (len(RunState) + 2) * (len(CallState) + 2) * len(KINDS)
"""(run state, call state, event kind): every state, "none" (no record yet) and "-" (the
event is not about a run or a call), times every kind of event."""


@dataclass
class Found:
    """A broken invariant: the episode's seed, the schedule as found, and as shrunk."""

    seed: int
    original: Outcome
    shrunk: Outcome
    seconds_to_find: float
    events_to_find: int

    def replay_document(self) -> dict[str, Any]:
        best = self.shrunk
        return {
            "version": REPLAY_VERSION,
            "seed": self.seed,
            "choices": best.choices,
            "invariant": best.broken,
            "details": best.violation[best.broken or ""],
            "steps": [s.line(i) for i, s in enumerate(best.steps, 1)],
        }


@dataclass
class Report:
    seed: int
    episodes: int = 0
    events: int = 0
    seconds: float = 0.0
    triples: set[tuple[str, str, str]] = field(default_factory=set)
    found: Found | None = None

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def episode_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


async def explore(
    world: World,
    *,
    seed: int,
    seconds: float | None = None,
    events: int | None = None,
    shrink_s: float = SHRINK_S,
    shrink_replays: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    """Explore until ``seconds`` or ``events`` are spent, or an invariant breaks."""
    report = Report(seed)
    started = last_said = time.monotonic()
    while not _spent(report, started, seconds, events):
        own = episode_seed(seed, report.episodes)
        outcome = await run_episode(world, Choices(rng=random.Random(own)), own)
        report.episodes += 1
        report.events += len(outcome.steps)
        report.triples |= outcome.triples
        report.seconds = time.monotonic() - started
        if outcome.broken:
            progress(f"{outcome.broken} broken after {report.events} events: shrinking")
            shrunk = await shrink(world, own, outcome, shrink_s, shrink_replays)
            report.found = Found(own, outcome, shrunk, report.seconds, report.events)
            break
        if time.monotonic() - last_said >= PROGRESS_EVERY_S:
            last_said = time.monotonic()
            progress(
                f"{report.events} events, {report.episodes} episodes, "
                f"{len(report.triples)} triples, no violation"
            )
    report.seconds = time.monotonic() - started
    return report


def _spent(report: Report, started: float, seconds: float | None, events: int | None) -> bool:
    if events is not None:
        return report.events >= events
    return time.monotonic() - started >= (seconds if seconds is not None else 60.0)


async def replay(world: World, seed: int, choices: list[str], *, drain: bool = True) -> Outcome:
    return await run_episode(world, Choices(recorded=choices), seed, drain=drain)


async def shrink(
    world: World, seed: int, found: Outcome, budget_s: float, replays: int | None = None
) -> Outcome:
    """The shortest schedule found within ``budget_s`` (and at most ``replays`` replays, a
    budget whose result does not depend on the machine's speed) that breaks the same
    invariant."""
    deadline = time.monotonic() + budget_s
    best = found
    name = found.broken
    drain = found.chosen is not None  # it broke in the drain or at rest: keep the drain
    tries = 0

    def in_budget() -> bool:
        return time.monotonic() < deadline and (replays is None or tries < replays)

    async def still_breaks(candidate: list[str]) -> bool:
        nonlocal best, tries
        tries += 1
        outcome = await replay(world, seed, candidate, drain=drain)
        shorter = (len(outcome.steps), len(outcome.choices)) < (len(best.steps), len(best.choices))
        if outcome.broken != name or len(outcome.steps) > len(best.steps) or not shorter:
            return False
        best = outcome
        return True

    for split in (steps_of, tokens_of):  # whole steps first, then single answers
        chunk = max(1, len(split(best.choices)) // 2)
        while chunk >= 1 and in_budget():
            start, removed = 0, False
            while start < len(split(best.choices)) and in_budget():
                units = split(best.choices)
                if await still_breaks(
                    [t for u in units[:start] + units[start + chunk :] for t in u]
                ):
                    removed = True
                else:
                    start += chunk
            if not removed:
                chunk //= 2
    return best


def steps_of(choices: list[str]) -> list[list[str]]:
    """The choices by step: each event with the answers given during it."""
    steps: list[list[str]] = []
    for token in choices:
        if token.startswith(EVENT) or not steps:
            steps.append([token])
        else:
            steps[-1].append(token)
    return steps


def tokens_of(choices: list[str]) -> list[list[str]]:
    return [[token] for token in choices]


def write_replay(found: Found, path: Path) -> None:
    path.write_bytes(orjson.dumps(found.replay_document(), option=orjson.OPT_INDENT_2))


def read_replay(path: Path) -> tuple[int, list[str], str]:
    """(seed, choices, invariant) of a replay file; ValueError if it is not one."""
    try:
        document = orjson.loads(path.read_bytes())
        if document.get("version") != REPLAY_VERSION:
            raise ValueError(f"version {document.get('version')!r}, not {REPLAY_VERSION}")
        return (
            int(document["seed"]),
            [str(c) for c in document["choices"]],
            str(document["invariant"]),
        )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a replay file ({exc})") from exc
