"""What each ledger step costs Redis, held exactly: a change that adds a round trip or a
command to a step fails here with the new figures, so the cost of a guard is a decision, not
a drift.  Real workers on a Redis of this test's own (MONITOR sees every client), the
throughput benchmark's scenario and its watched batch (`callgate.ops.bench.cost`)."""

from __future__ import annotations

import pytest

from callgate.ops.bench import cost, throughput
from callgate.ops.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.slow

API = "openai-responses"
EXPECTED: dict[str, tuple[float, float]] = {
    "start_run": (0.1, 8.0),
    "start_calls": (0.5, 13.0),
    "decide_calls": (0.5, 11.0),
    "take_call": (1.0, 5.0),
    "settle_call": (1.0, 6.0),
    "advance_turn": (0.5, 9.0),
    "finish_turn": (0.1, 25.0),
}
"""Step → (runs per tool call, commands per run: its EVALSHA and what its script ran) for
bench-parallel: five turns of two parallel reads, then the answer."""


async def test_each_step_runs_the_commands_it_ran_before() -> None:
    calls_per_run = throughput.TURNS * throughput.CALLS_PER_TURN
    with EmbeddedRedis() as own:
        table = await cost.step_costs(
            own.url,
            API,
            throughput.SCENARIO,
            throughput.WARM_UP,
            2,
            calls_per_run,
            progress=lambda _: None,
        )
    steps = {name: row for name, row in table["steps"].items() if name != cost.OTHER_SCRIPT}
    got = {
        name: (round(row["runs_per_call"], 3), row["commands_per_run"])
        for name, row in steps.items()
    }
    detail = "\n".join(f"  {name}: {row['by_command_per_run']}" for name, row in steps.items())
    assert got == EXPECTED, f"the steps' Redis costs changed; now:\n{got}\n{detail}"
