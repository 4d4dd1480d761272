"""What a tool call costs Redis: commands (those run inside the ledger's Lua steps included),
in all and by ledger step.

The totals come from Redis's own ``INFO commandstats`` around the measured window, so they
count every command the system sent (arq, upkeep, the stream reads), not only the steps.
The table by step comes from a separate, smaller batch, on a deployment of its own that sends
each step alone (group commit off), watched with ``MONITOR``: each
``EVALSHA`` names its step (`Tx.step`, the script's last argument) and the commands a script
runs are printed right after it, since a script runs alone.  ``MONITOR`` slows Redis down, so
that batch is never the timed one.  The counts of a step are deterministic: the same step on
the same path runs the same commands, which is what lets a test hold them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from callgate.connect import RedisClient
from callgate.ops.bench.harness import Deployment, run_spec
from callgate.ops.stack import Progress

_STEP_NAME = re.compile(r"[a-z][a-z_]*")
UNGROUPED = {"CALLGATE_GROUP_STEPS": "0"}
"""The watched deployment sends each step in a script call of its own, so MONITOR shows which
commands a step ran (a script's commands follow its EVALSHA).  Group commit, on everywhere
else, changes no step's commands: it only sends several steps in one EVALSHA."""
OTHER_SCRIPT = "(other scripts)"
"""Scripts that are not ledger steps (arq's, the stream loop's reclaim)."""


@dataclass(frozen=True)
class CommandStats:
    """``INFO commandstats`` at one moment, by command name."""

    calls: Counter[str]
    usec: Counter[str]
    """Redis's own time in each command; a script's includes the commands it ran."""


async def commands_so_far(redis: RedisClient) -> CommandStats:
    """Calls of, and time in, every command since Redis started (or ``CONFIG RESETSTAT``)."""
    stats = await redis.info("commandstats")
    names = {name: name.removeprefix("cmdstat_") for name in stats}
    return CommandStats(
        Counter({names[name]: int(row["calls"]) for name, row in stats.items()}),
        Counter({names[name]: int(row["usec"]) for name, row in stats.items()}),
    )


def per_call(before: Counter[str], after: Counter[str], calls: int) -> dict[str, float]:
    """Commands (or µs) per tool call between two `commands_so_far` readings, largest first."""
    spent = after - before
    spent.pop("info", None)  # the readings themselves
    return {name: count / calls for name, count in spent.most_common()}


@dataclass
class StepCost:
    """What one named step cost over the watched batch."""

    runs: int = 0
    """How many times the step ran."""
    commands: int = 0
    """Its EVALSHAs and the commands its script ran inside them."""
    by_command: Counter[str] = field(default_factory=Counter)


class Watch:
    """Reads MONITOR's lines and charges each to a step, or to the command outside any step."""

    def __init__(self) -> None:
        self.steps: dict[str, StepCost] = {}
        self.outside: Counter[str] = Counter()
        self._current: StepCost | None = None

    def line(self, client_type: str, command_line: str) -> None:
        """One MONITOR line as redis-py's `Monitor` gives it: the arguments joined by spaces
        (a step's name, the last, has none)."""
        args = command_line.split(" ")
        command = args[0].upper()
        if client_type == "lua":
            if self._current is not None:
                self._current.commands += 1
                self._current.by_command[command] += 1
            return
        self._current = None
        if command == "EVALSHA" and len(args) > 3:
            name = args[-1] if _STEP_NAME.fullmatch(args[-1]) else OTHER_SCRIPT
            cost = self.steps.setdefault(name, StepCost())
            cost.runs += 1
            cost.commands += 1
            cost.by_command[command] += 1
            self._current = cost
        elif command not in ("MONITOR", "INFO"):
            self.outside[command] += 1

    def table(self, calls: int) -> dict[str, dict[str, Any]]:
        """Per step: runs per tool call, commands per run and per tool call."""
        return {
            name: {
                "runs_per_call": cost.runs / calls,
                "commands_per_run": cost.commands / cost.runs,
                "commands_per_call": cost.commands / calls,
                "by_command_per_run": {c: n / cost.runs for c, n in cost.by_command.items()},
            }
            for name, cost in sorted(self.steps.items(), key=lambda kv: -kv[1].commands)
        }


async def watched(redis: aioredis.Redis, work: Callable[[], Awaitable[Any]]) -> Watch:
    """Run ``work`` while MONITOR feeds a `Watch`; the watch once every line is read."""
    watch = Watch()
    marker = f"callgate-bench-end-{id(watch)}"
    async with redis.monitor() as monitor:
        await work()
        await redis.echo(marker)
        while True:
            seen = await monitor.next_command()
            if marker in seen["command"]:
                return watch
            watch.line(seen["client_type"], seen["command"])


async def step_costs(
    redis_url: str,
    api: str,
    scenario: str,
    warm_up: str,
    runs: int,
    calls_per_run: int,
    progress: Progress,
) -> dict[str, Any]:
    """Watch ``runs`` runs of ``scenario``, after one ``warm_up`` run, on a deployment of their
    own with group commit off (`UNGROUPED`): the cost table by step and what ran outside."""
    async with Deployment(redis_url, env=UNGROUPED, progress=progress) as deployment:
        assert deployment.redis is not None
        await deployment.run_batch(run_spec(api, warm_up), 1, timeout_s=120.0)
        spec = run_spec(api, scenario)

        async def batch() -> None:
            await deployment.run_batch(spec, runs, timeout_s=120.0)

        assert isinstance(deployment.redis, aioredis.Redis), "MONITOR watches one server"
        watch = await watched(deployment.redis, batch)
    calls = runs * calls_per_run
    return {
        "runs": runs,
        "steps": watch.table(calls),
        "step_commands_per_call": sum(c.commands for c in watch.steps.values()) / calls,
        "outside_per_call": {n: c / calls for n, c in watch.outside.most_common()},
    }
