"""The explorer finds a broken guard: each mutation (tests/explore/mutations.py) breaks one,
inside this test only, and the explorer must find it within the CI budget and shrink it to a
short schedule that replays to the same violation."""

from __future__ import annotations

import pytest

from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.explore.session import explore, read_replay, replay, write_replay
from callgate.ops.explore.world import World, new_home
from tests.explore.mutations import MUTATIONS

pytestmark = pytest.mark.slow

FIND_WITHIN_S = 60.0
SHRINK_REPLAYS = 200
"""Replays the shrinking may spend: each mutation's converges within 170 (reconciler_replays:
164, 11 s on a quiet VM), and a count, unlike a time, shrinks to the same schedule on a slow
machine."""
SHRINK_S = 120.0
"""Only a guard against a hang."""
SHORT = 20
"""Steps a shrunk schedule may have at most."""
EXPECTED = {
    "already_taken": {"open_takes", "duplicate_writes"},
    "approval_not_consumed": {"approvals_misused"},
    "ack_before_settling": {"cancel_mismatches", "lost_runs", "liveness"},
    "reconciler_replays": {"duplicate_writes"},
    "cancel_leaves_queued_writes": {"taken_after_cancel", "cancelled_calls_executed"},
    "result_under_wrong_id": {"mispaired_results"},
}
"""What each mutation is caught as (the first invariant the schedule breaks)."""


@pytest.mark.timeout(FIND_WITHIN_S + SHRINK_S + 60)
@pytest.mark.parametrize("name", sorted(MUTATIONS))
async def test_the_explorer_finds_a_broken_guard(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    MUTATIONS[name](monkeypatch)
    with EmbeddedRedis() as redis:
        world = World(redis.url, new_home())
        try:
            report = await explore(
                world,
                seed=1,
                seconds=FIND_WITHIN_S,
                shrink_s=SHRINK_S,
                shrink_replays=SHRINK_REPLAYS,
            )
            found = report.found
            assert found is not None, f"{name}: not found in {report.events} events"
            assert found.shrunk.broken in EXPECTED[name], found.shrunk.violation
            assert len(found.shrunk.steps) <= SHORT, [s.label for s in found.shrunk.steps]
            path = new_home() / "failure.json"
            write_replay(found, path)
            seed, choices, invariant = read_replay(path)
            again = await replay(world, seed, choices)
            assert again.broken == invariant == found.shrunk.broken
            assert [s.label for s in again.steps] == [s.label for s in found.shrunk.steps]
        finally:
            await world.close()
    print(
        f"{name}: {found.shrunk.broken} after {found.events_to_find} events "
        f"({found.seconds_to_find:.1f} s), shrunk {len(found.original.steps)} -> "
        f"{len(found.shrunk.steps)} steps"
    )
