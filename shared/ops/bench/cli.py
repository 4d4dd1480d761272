"""`callgate bench`: run the benchmark scenarios on this machine; a table, or JSON with --json.

    callgate bench [--scenario latency|throughput|throughput-redis-py|throughput-aof|
                               throughput-replica|throughput-tracing|throughput-webhook-up|
                               throughput-webhook-down|throughput-cluster|instructions|
                               executors|scale-out|recovery|memory|mcp|http …]
                   [--runs N] [--repeats N]
                   [--json] [--smoke]

Without ``--scenario``, every scenario but throughput-cluster (it runs only when named).
Progress goes to stderr; the table (or the JSON document) to stdout.  Exit code 0 when every
chosen scenario ran (and, with ``--check``, met its targets), 1 otherwise; 2 for a bad option
(one line on stderr), such as ``--repeats 0`` or a ``--redis-url`` that is not one server's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, get_args

import orjson
import redis.asyncio as aioredis

from callgate.compiled import COMPILED, compiled_modules
from callgate.connect import CLUSTER_SCHEME, SENTINEL_SCHEME
from callgate.envelopes import new_id
from callgate.keys import Keys
from callgate.ops.bench import (
    cases,
    cluster,
    executors,
    http_api,
    instructions,
    latency,
    mcp_read,
    memory,
    report,
    scaleout,
    throughput,
    variants,
)
from callgate.ops.bench.floor import FloorRelay
from callgate.ops.bench.harness import Deployment, bench_redis, delete_prefix
from callgate.ops.bench.variants import VARIANTS
from callgate.ops.stack import base_env, progress_to_stderr
from callgate.ops.supervisor import Supervisor, quiet_sink
from callgate.records import Api

SCENARIOS = (
    "latency",
    "throughput",
    *VARIANTS,
    cluster.NAME,
    "instructions",
    "executors",
    "scale-out",
    "recovery",
    "memory",
    "mcp",
    "http",
    cases.NAME,
)
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s != cluster.NAME)
"""What runs without ``--scenario``: all but throughput-cluster, which starts a cluster of six
servers and three deployments a repeat, so it runs only when named."""
APIS: tuple[str, ...] = get_args(Api)


@dataclass(frozen=True)
class Options:
    scenarios: tuple[str, ...]
    api: str
    runs: int
    repeats: int
    rss_runs: int
    exec_calls: int
    recovery_reps: int
    retention_s: int
    redis_url: str | None
    private_redis: bool
    latency_scenario: str
    mcp_calls: int


SMOKE = {"runs": 4, "rss_runs": 8, "exec_calls": 60, "recovery_reps": 1, "retention_s": 2}
"""`--smoke`: every scenario and figure, tiny sizes (CI; says nothing about speed)."""
LATENCY, SMOKE_LATENCY = "bench-latency", "bench-three-turns"
"""The latency scenario: 50 round trips, or 2 in a smoke run."""
INSTRUCTION_RUNS = 50
"""Runs the ``instructions`` scenario records and replays (about 2,200 steps)."""
CASES = 100
"""Recorded cases the ``cases`` scenario replays in one `callgate cases run`."""
MCP_CALLS, MCP_SMOKE_CALLS = 500, 10
"""Reads per way in the ``mcp`` scenario."""


def options(args: argparse.Namespace) -> Options:
    sizes = {k: getattr(args, k) for k in SMOKE}
    if args.smoke:
        sizes = {k: v if getattr(args, f"{k}_given", False) else SMOKE[k] for k, v in sizes.items()}
    return Options(
        scenarios=tuple(args.scenario or DEFAULT_SCENARIOS),
        api=args.api,
        repeats=args.repeats,
        redis_url=args.redis_url,
        private_redis=args.private_redis,
        latency_scenario=SMOKE_LATENCY if args.smoke else LATENCY,
        mcp_calls=MCP_SMOKE_CALLS if args.smoke else MCP_CALLS,
        **sizes,
    )


async def measure(opts: Options, redis_url: str) -> dict[str, dict[str, Any]]:
    """Run the chosen scenarios; their summaries by scenario name."""
    progress = progress_to_stderr
    chosen = set(opts.scenarios)
    summary: dict[str, dict[str, Any]] = {}
    supervisor = Supervisor(quiet_sink)
    prefix = f"cgbench{new_id()[:8]}"
    redis = aioredis.Redis.from_url(redis_url)
    try:
        floor = None
        if chosen & {"latency", "throughput"}:
            env = {**base_env(), "REDIS_URL": redis_url, "CALLGATE_KEY_PREFIX": prefix}
            floor = await FloorRelay(supervisor, env, redis, Keys(prefix)).start()
        if floor is not None and "latency" in chosen:
            raw = await latency.measure(redis_url, opts.api, opts.latency_scenario, floor, progress)
            summary["latency"] = report.latency_summary(raw)
        if chosen & {"throughput", "memory"}:
            summary.update(await _throughput_memory(opts, redis_url, floor, chosen))
        summary.update(await _variants(opts, redis_url, chosen))
        await asyncio.to_thread(supervisor.stop_all)
        if "instructions" in chosen:
            runs = min(opts.runs, INSTRUCTION_RUNS)
            summary["instructions"] = await instructions.measure(opts.api, runs, progress)
        if chosen & {"executors", "recovery"}:
            raw = await executors.measure(
                redis_url,
                opts.exec_calls,
                opts.recovery_reps if "recovery" in chosen else 0,
                "executors" in chosen,
                progress,
            )
            if "executors" in chosen:
                summary["executors"] = report.executors_summary(raw["one"], raw["two"])
            if "recovery" in chosen:
                summary["recovery"] = report.recovery_summary(raw["recovery_s"])
        if "scale-out" in chosen:
            summary["scale-out"] = await scaleout.measure(redis_url, opts.exec_calls, progress)
        if "mcp" in chosen:
            summary["mcp"] = await mcp_read.measure(opts.mcp_calls, progress)
        if "http" in chosen:
            summary["http"] = await http_api.measure(redis_url, opts.api, opts.runs, progress)
        if cases.NAME in chosen:
            summary[cases.NAME] = await cases.measure(opts.api, min(opts.runs, CASES), progress)
    finally:
        await asyncio.to_thread(supervisor.stop_all)
        await delete_prefix(redis, prefix)
        await redis.aclose()
    return summary


async def _throughput_memory(
    opts: Options, redis_url: str, floor: FloorRelay | None, chosen: set[str]
) -> dict[str, Any]:
    """One in-process deployment (with the memory scenario's retention) for both."""
    out: dict[str, Any] = {}
    env = {"CALLGATE_RETENTION_S": str(opts.retention_s)}
    async with Deployment(redis_url, env=env, progress=progress_to_stderr) as deployment:
        if floor is not None and "throughput" in chosen:
            raw = await throughput.measure(
                deployment, opts.api, opts.runs, floor, progress_to_stderr
            )
            out["throughput"] = report.throughput_summary(raw)
        if "memory" in chosen:
            out["memory"] = await memory.measure(
                deployment, opts.api, opts.runs, opts.rss_runs, opts.retention_s, progress_to_stderr
            )
    return out


async def _variants(opts: Options, redis_url: str, chosen: set[str]) -> dict[str, Any]:
    """The throughput scenario under other settings, and on a private cluster."""
    out: dict[str, Any] = {}
    for variant in VARIANTS:
        if variant in chosen:
            out[variant] = await variants.measure(
                variant, redis_url, opts.api, opts.runs, progress_to_stderr
            )
    if cluster.NAME in chosen:
        out[cluster.NAME] = await cluster.measure(
            redis_url, opts.api, opts.runs, opts.repeats, progress_to_stderr
        )
    return out


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def build() -> str:
    """Whether the workers (they inherit this process's ``PYTHONPATH``) run the step builders
    compiled (`callgate compile`) or from their sources."""
    compiled = compiled_modules()
    if not compiled:
        return "sources"
    return "compiled" if len(compiled) == len(COMPILED) else f"compiled in part: {compiled}"


SPEED_LOOP_ADDS = 10_000_000


def python_loop_s() -> float:
    """Seconds a pure-Python loop of 10 million additions takes here.  Throughput is bound by
    CPU, so its absolute figure follows the machine's speed: this says how fast a machine the
    figures came from (README compares machines by it)."""
    started = time.perf_counter()
    total = 0
    for i in range(SPEED_LOOP_ADDS):
        total += i
    return time.perf_counter() - started


def cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) CPU time of the whole machine so far (Linux /proc/stat), else None.

    Steal is time a hypervisor gave this VM's CPUs to someone else: a benchmark whose
    figures moved for that reason says so."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


def stolen_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


async def run(args: argparse.Namespace) -> int:
    opts = options(args)
    load_before, jiffies_before = machine(), cpu_jiffies()
    loop_s = python_loop_s()
    with bench_redis(opts.redis_url, progress_to_stderr, private=opts.private_redis) as redis_url:
        summary = await measure(opts, redis_url)
    met = report.targets(summary)
    stolen = stolen_share(jiffies_before, cpu_jiffies())
    document = {
        "machine": {
            **load_before,
            "python_loop_s": loop_s,
            "build": build(),
            "load_avg_after": machine()["load_avg"],
            "cpu_stolen_share": stolen,
        },
        "options": {k: v for k, v in opts.__dict__.items() if k != "redis_url"},
        "scenarios": summary,
        "targets": met,
    }
    if args.json:
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        steal = "" if stolen is None else f", {stolen:.0%} of CPU time stolen by the hypervisor"
        print(
            f"machine: {machine()['cpus']} cpus, load {load_before['load_avg']}, "
            f"10M Python additions in {loop_s:.2f} s{steal}; "
            f"step builders: {document['machine']['build']}"
        )
        print(report.table(summary, met))
        details = report.breakdowns(summary)
        if details:
            print(f"\n{details}")
        if cluster.NAME in summary:
            print(f"\n{cluster.table(summary[cluster.NAME])}")
    return 1 if args.check and not all(t["met"] for t in met.values()) else 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _one_server(text: str) -> str:
    """``--redis-url`` (argparse ``type``): the benchmark's Redis is one server; the URL of a
    cluster or of sentinels is a usage line and exit 2, not a traceback from redis-py."""
    scheme = text.partition("://")[0].lower()
    if scheme in (CLUSTER_SCHEME, SENTINEL_SCHEME):
        raise argparse.ArgumentTypeError(
            f"the benchmark runs on one Redis server, not {scheme}:// "
            f"(--scenario {cluster.NAME} starts a cluster of its own)"
        )
    return text


class _Given(argparse.Action):
    """Store the value and note that it was given (so --smoke does not override it)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def add_command(subparsers: Any) -> None:
    bench = subparsers.add_parser("bench", help="measure the runtime beside a raw Redis relay")
    bench.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help=f"repeatable; default: all but {cluster.NAME}",
    )
    _add_sizes(bench)
    bench.add_argument("--api", choices=APIS, default="openai-responses")
    bench.add_argument(
        "--redis-url",
        type=_one_server,
        help="one server's; default: REDIS_URL if it answers, else a private one",
    )
    bench.add_argument(
        "--private-redis",
        action="store_true",
        help="always start a private redis-server for the benchmark",
    )
    bench.add_argument("--smoke", action="store_true", help="tiny sizes: checks it all runs")
    bench.add_argument("--check", action="store_true", help="exit 1 if a target is not met")
    bench.add_argument("--json", action="store_true", help="print the data as JSON")
    bench.set_defaults(handler=run)


def _add_sizes(bench: argparse.ArgumentParser) -> None:
    """How much each scenario measures; ``--smoke`` shrinks each but ``--repeats``."""
    bench.add_argument(
        "--runs",
        type=_positive,
        default=200,
        action=_Given,
        help="concurrent runs (throughput, memory)",
    )
    bench.add_argument(
        "--repeats",
        type=_positive,
        default=1,
        help=f"{cluster.NAME}: how many times its legs run, interleaved (median and range)",
    )
    bench.add_argument(
        "--rss-runs",
        type=_positive,
        default=10_000,
        action=_Given,
        help="runs between the two RSS readings",
    )
    bench.add_argument(
        "--exec-calls",
        type=_positive,
        default=4000,
        action=_Given,
        help="50 ms calls per executor measurement",
    )
    bench.add_argument("--recovery-reps", type=_positive, default=5, action=_Given)
    bench.add_argument(
        "--retention-s",
        type=_positive,
        default=10,
        action=_Given,
        help="the memory deployment's CALLGATE_RETENTION_S",
    )
