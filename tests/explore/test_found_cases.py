"""Schedules the explorer once found breaking an invariant on main, kept as regression cases:
each must replay clean now (and still be a replay file the command reads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.explore.session import read_replay, replay
from callgate.ops.explore.world import World, new_home

CASES = sorted((Path(__file__).parent / "cases").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
async def test_a_schedule_once_found_holds_now(path: Path) -> None:
    seed, choices, invariant = read_replay(path)
    with EmbeddedRedis() as redis:
        world = World(redis.url, new_home())
        try:
            outcome = await replay(world, seed, choices)
        finally:
            await world.close()
    assert outcome.broken is None, (invariant, outcome.violation)
    assert len(outcome.steps) >= len(choices) // 2  # the schedule really ran
