"""The previous release's workers and this tree's, side by side in the same consumer groups, as
during a rolling upgrade (issue #29).

Three mixes in turn, each serving a batch of conformance cells — approvals, writes whose answer
is lost and reconciled, a person's resolution, parallel reads finishing out of order,
server-side rejections — on two protocols (each protocol is served by two mixes):

* the previous release's ingress, model_turn and validator with this tree's executor and
  reconciler: every decided call crosses from old to new, every result back;
* then this tree's front and the previous release's back join them: every kind from both
  releases, one replica each, so which release takes a message is the consumer groups' choice
  and any hop may cross releases;
* then the first two groups stop (SIGTERM, as in a rolling restart): the reverse of the first.

Every cell must pass as it does in the conformance matrix (states, executions and reservations
counted by the services, paths, what the model received), with no dead letter.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from callgate.client import CallgateClient
from callgate.ops.conformance.catalogue import APIS, select
from callgate.ops.conformance.runner import Plan, run_plan
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.upgrade.fleet import dead_letters, explained, generation, tails, wait_serving, world
from tests.upgrade.previous_release import Installed

pytestmark = pytest.mark.slow

CASES = select(
    ("approval", "connection-lost", "resolved-by-person", "out-of-order", "server-rejection")
)
GROUPS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "old front": (True, ("ingress", "model_turn", "validator")),
    "new back": (False, ("executor", "reconciler")),
    "new front": (False, ("ingress", "model_turn", "validator")),
    "old back": (True, ("executor", "reconciler")),
}
"""Group → (of the previous release?, its worker kinds, one replica each)."""
PHASES: tuple[tuple[str, frozenset[str]], ...] = (
    ("old front, new back", frozenset({"old front", "new back"})),
    ("every kind from both", frozenset(GROUPS)),
    ("new front, old back", frozenset({"new front", "old back"})),
)
CELL_TIMEOUT_S = 45.0


@pytest.fixture(scope="module")
def outside(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    with world(redis_server.url) as running:
        yield running


def regroup(
    outside: LocalSystem,
    previous: Installed,
    running: dict[str, LocalSystem],
    wanted: frozenset[str],
) -> None:
    """Start the groups ``wanted`` that are not running and wait until they serve, then stop
    those not wanted."""
    started = []
    for name in sorted(wanted - set(running)):
        old, kinds = GROUPS[name]
        running[name] = generation(outside, dict.fromkeys(kinds, 1), previous if old else None)
        started.append(running[name])
    for workers in started:
        wait_serving(workers)
    for name in sorted(set(running) - wanted):
        running.pop(name).stop()


async def serve_batch(outside: LocalSystem, phase: int, running: dict[str, LocalSystem]) -> None:
    """Conformance's cells of `CASES` on two protocols; every one passes, no dead letter."""
    apis = (APIS[phase % len(APIS)], APIS[(phase + 1) % len(APIS)])
    async with CallgateClient(outside.settings) as client:
        earlier = len(await dead_letters(client))
        outcomes = await run_plan(outside, Plan(CASES, apis, cell_timeout_s=CELL_TIMEOUT_S))
        found = await dead_letters(client)
    problems = [
        f"{o.cell.case} × {o.cell.api} (run {o.observation.run_id}): {o.cell.detail}"
        for o in outcomes
        if not o.cell.passed
    ]
    letters = found[: len(found) - earlier]  # newest first
    assert problems == letters == [], "\n".join([*problems, *letters, tails(running)])


async def test_old_and_new_workers_side_by_side(outside: LocalSystem, previous: Installed) -> None:
    running: dict[str, LocalSystem] = {}
    try:
        for n, (mix, groups) in enumerate(PHASES):
            try:
                with explained(running):
                    regroup(outside, previous, running, groups)
                await serve_batch(outside, n, running)
            except Exception as exc:
                exc.add_note(f"with {mix}")
                raise
    finally:
        for workers in running.values():
            workers.stop()
