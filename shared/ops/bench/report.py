"""From raw measurements to figures, targets and the printed table.  Pure: no I/O.

Targets hold on the issue's reference machine (2 cores); latency and throughput are also
given as ratios to the floor measured in the same run, which survive a noisy machine.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    figure: str
    """Where the value is: ``scenario.figure`` in the summary."""
    bound: float
    at_most: bool
    """True: value ≤ bound meets it; False: value ≥ bound."""

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


TARGETS: dict[str, Target] = {
    "round_trip_p50_vs_floor": Target("latency.in_process_p50_vs_floor", 1.5, True),
    "throughput_calls_per_s": Target("throughput.calls_per_s", 1500.0, False),
    "redis_commands_per_call": Target("throughput.redis_commands_per_call", 30.0, True),
    "redis_cpu_us_per_call": Target("throughput.redis_cpu_us_per_call", 120.0, True),
    "aof_always_vs_everysec": Target("throughput-aof.always_vs_everysec", 0.85, False),
    "executor_1proc_calls_per_s": Target("executors.one_calls_per_s", 1000.0, False),
    "executor_2proc_vs_1proc": Target("executors.two_vs_one", 1.0, False),
    "executor_8proc_vs_4proc": Target("scale-out.8_vs_4", 1.5, False),
    "recovery_p50_s": Target("recovery.p50_s", 2.0, True),
    "recovery_max_s": Target("recovery.max_s", 5.0, True),
    "redis_bytes_per_run": Target("memory.bytes_per_run", 20_480.0, True),
    "run_keys_left_after_retention": Target("memory.keys_left_after_retention", 0.0, True),
    "rss_growth": Target("memory.rss_growth_max", 0.10, True),
    "cases_run_s": Target("cases.seconds", 30.0, True),
}


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN without samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def _ratio(value: float, floor: float) -> float:
    return value / floor if floor else math.nan


def latency_summary(raw: dict[str, Any]) -> dict[str, Any]:
    floor = raw["floor_ms"]
    out: dict[str, Any] = {"round_trips": len(raw["in_process_ms"])}
    for name in ("floor", "in_process", "sdk"):
        samples = raw[f"{name}_ms"]
        out[f"{name}_p50_ms"] = percentile(samples, 50)
        out[f"{name}_p99_ms"] = percentile(samples, 99)
    for name in ("in_process", "sdk"):
        out[f"{name}_p50_vs_floor"] = _ratio(out[f"{name}_p50_ms"], out["floor_p50_ms"])
    out["steps_ms"] = step_breakdown(raw["events"])
    out["samples_ms"] = {k.removesuffix("_ms"): v for k, v in raw.items() if k.endswith("_ms")}
    out["floor_round_trips"] = len(floor)
    return out


STEPS: tuple[tuple[str, str, str], ...] = (
    # (what the step does, event type that commits it, the state it moves to)
    ("model_turn: turn message read, model asked, calls recorded", "model.response", ""),
    ("validator: calls decided", "call.transition", "allowed"),
    ("executor: call taken", "call.transition", "executing"),
    ("executor: tool run, outcome recorded", "call.transition", "succeeded"),
    ("model_turn: result read, next turn requested", "run.transition", "awaiting_model"),
)
"""The five atomic steps of a one-call round trip, in order."""


def step_breakdown(events: Sequence[tuple[str, str, str]]) -> dict[str, float]:
    """Mean ms from each step's commit to the next one's, over a run of one-call turns.

    ``events`` are (stream id, type, to-state) of the run's event log; a stream id starts
    with the Redis clock in ms at the commit, so each mean is good to well under a ms over
    50 turns.  Where a round trip's time goes, step by step (the last one holds the model).
    """
    marks = [
        (int(i.split("-")[0]), n)
        for i, kind, to in events
        for n, (_, k, state) in enumerate(STEPS)
        if kind == k and to == state
    ]
    gaps: dict[int, list[int]] = {n: [] for n in range(len(STEPS))}
    for (before, step), (after, nxt) in itertools.pairwise(marks):
        if nxt == (step + 1) % len(STEPS):
            gaps[nxt].append(after - before)
    return {STEPS[n][0]: statistics.fmean(v) for n, v in gaps.items() if v}


def throughput_summary(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "vs_floor": _ratio(raw["calls_per_s"], raw["floor_calls_per_s"])}


def executors_summary(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    return {
        "one_calls_per_s": one["calls_per_s"],
        "two_calls_per_s": two["calls_per_s"],
        "two_vs_one": _ratio(two["calls_per_s"], one["calls_per_s"]),
        "one_in_flight_mean": one["in_flight_mean"],
        "one_in_flight_max": one["in_flight_max"],
        "two_in_flight_mean": two["in_flight_mean"],
        "two_in_flight_max": two["in_flight_max"],
        "calls": one["calls"],
    }


def recovery_summary(times_s: list[float]) -> dict[str, Any]:
    return {
        "repetitions": len(times_s),
        "p50_s": statistics.median(times_s) if times_s else math.nan,
        "max_s": max(times_s, default=math.nan),
        "samples_s": times_s,
    }


def targets(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One entry per target whose scenario ran: value, target (e.g. "<= 2.0"), met."""
    out: dict[str, dict[str, Any]] = {}
    for name, target in TARGETS.items():
        scenario, figure = target.figure.split(".")
        if scenario not in summary:
            continue
        value = float(summary[scenario][figure])
        sign = "<=" if target.at_most else ">="
        met = not math.isnan(value) and target.met(value)
        out[name] = {"value": value, "target": f"{sign} {target.bound:g}", "met": met}
    return out


TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("latency", "floor_p50_ms", "4-hop floor p50 (ms)"),
    ("latency", "floor_p99_ms", "4-hop floor p99 (ms)"),
    ("latency", "in_process_p50_ms", "round trip p50, in-process model (ms)"),
    ("latency", "in_process_p99_ms", "round trip p99, in-process model (ms)"),
    ("latency", "in_process_p50_vs_floor", "  p50 / floor"),
    ("latency", "sdk_p50_ms", "round trip p50, SDK + scripted server (ms)"),
    ("latency", "sdk_p99_ms", "round trip p99, SDK + scripted server (ms)"),
    ("latency", "sdk_p50_vs_floor", "  p50 / floor"),
    ("throughput", "calls_per_s", "throughput (tool calls/s)"),
    ("throughput", "floor_calls_per_s", "batched floor (calls/s)"),
    ("throughput", "vs_floor", "  throughput / floor"),
    ("throughput", "cpu_ms_per_call", "  CPU per tool call, all processes (ms)"),
    ("throughput", "workers_cpu_ms_per_call", "  Python CPU per tool call, the workers (ms)"),
    ("throughput", "runtime_cpu_ms_per_call", "    less the model stand-in in model_turn (ms)"),
    ("throughput", "redis_cpu_us_per_call", "  Redis CPU per tool call (µs)"),
    ("throughput", "redis_commands_per_call", "  Redis commands per tool call"),
    ("throughput-redis-py", "calls_per_s", "throughput, plain redis-py transport"),
    ("throughput-aof", "everysec_calls_per_s", "throughput, Redis appendfsync everysec"),
    ("throughput-aof", "calls_per_s", "throughput, Redis appendfsync always"),
    ("throughput-aof", "always_vs_everysec", "  always / everysec"),
    ("throughput-replica", "none_calls_per_s", "throughput, writes, no durability wait"),
    ("throughput-replica", "calls_per_s", "throughput, writes, WAIT for a replica"),
    ("throughput-replica", "replica_vs_none", "  replica / none"),
    ("throughput-replica", "waits_per_call", "  WAITs per tool call"),
    ("throughput-tracing", "calls_per_s", "throughput, tracing on (100% sampled, OTLP)"),
    ("throughput-tracing", "cpu_ms_per_call", "  CPU per tool call, all processes (ms)"),
    ("throughput-webhook-up", "calls_per_s", "throughput, webhooks to a receiver that is up"),
    ("throughput-webhook-up", "cpu_ms_per_call", "  CPU per tool call, all processes (ms)"),
    ("throughput-webhook-down", "calls_per_s", "throughput, a webhook receiver down"),
    ("throughput-webhook-down", "cpu_ms_per_call", "  CPU per tool call, all processes (ms)"),
    ("instructions", "instructions_per_call", "Redis instructions per tool call (callgrind)"),
    ("instructions", "instructions_per_step", "  per ledger step"),
    ("executors", "one_calls_per_s", "1 executor, 50 ms tools (calls/s)"),
    ("executors", "one_in_flight_mean", "  calls in flight (mean)"),
    ("executors", "two_calls_per_s", "2 executors, 50 ms tools (calls/s)"),
    ("executors", "two_in_flight_mean", "  calls in flight (mean)"),
    ("executors", "two_vs_one", "  2 / 1"),
    ("scale-out", "eight_calls_per_s", "8 executors, 50 ms tools (calls/s)"),
    ("scale-out", "4_vs_2", "  4 / 2"),
    ("scale-out", "8_vs_4", "  8 / 4"),
    ("recovery", "p50_s", "recovery after SIGKILL p50 (s)"),
    ("recovery", "max_s", "recovery after SIGKILL max (s)"),
    ("memory", "bytes_per_run", "Redis bytes per finished 3-turn run"),
    ("memory", "own_bytes_per_run", "  the run's own keys"),
    ("memory", "shared_bytes_per_run", "  shared streams (trimmed once settled)"),
    ("memory", "bytes_per_run_after_retention", "  after retention"),
    ("memory", "keys_left_after_retention", "  run keys left after retention"),
    ("memory", "rss_growth_max", "worker RSS growth (max over workers)"),
    ("mcp", "local_p50_ms", "a read, local tool, p50 (ms)"),
    ("mcp", "stdio_p50_ms", "  the same read through MCP over stdio, p50 (ms)"),
    ("mcp", "stdio_p99_ms", "  the same read through MCP over stdio, p99 (ms)"),
    ("mcp", "http_p50_ms", "  the same read through MCP over HTTP, p50 (ms)"),
    ("mcp", "http_p99_ms", "  the same read through MCP over HTTP, p99 (ms)"),
    ("http", "arq_runs_per_s", "runs submitted/s, arq (CallgateClient)"),
    ("http", "api_runs_per_s", "runs submitted/s, POST /runs"),
    ("http", "sse_p50_ms", "SSE event, commit to client p50 (ms)"),
    ("http", "sse_p99_ms", "SSE event, commit to client p99 (ms)"),
    ("cases", "cases", "recorded cases replayed by `cases run`"),
    ("cases", "seconds", "  time, its deployment's start included (s)"),
    ("cases", "differ", "  cases that differed"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(summary: dict[str, dict[str, Any]], met: dict[str, dict[str, Any]]) -> str:
    """The human table: one line per figure, with its target and verdict where it has one."""
    by_figure = {TARGETS[name].figure: (name, entry) for name, entry in met.items()}
    lines = [f"{'figure':<46} {'value':>12}  {'target':<12} met"]
    for scenario, figure, label in TABLE_ROWS:
        if scenario not in summary or figure not in summary[scenario]:
            continue
        value = _fmt(summary[scenario][figure])
        _, entry = by_figure.get(f"{scenario}.{figure}", ("", None))
        verdict = ""
        if entry is not None:
            verdict = f"{entry['target']:<12} {'yes' if entry['met'] else 'NO'}"
        lines.append(f"{label:<46} {value:>12}  {verdict}".rstrip())
    return "\n".join(lines)


def breakdowns(summary: dict[str, dict[str, Any]]) -> str:
    """Where the time goes: a round trip step by step, a tool call's CPU by process."""
    parts = []
    for scenario, figure, title in (
        ("latency", "steps_ms", "round trip, step by step (in-process model), mean ms"),
        ("throughput", "cpu_ms_per_call_by_process", "CPU per tool call by process, ms"),
    ):
        rows = _with_stand_in(summary.get(scenario, {}), figure)
        if rows:
            parts.append("\n".join([title, *(f"  {k:<58} {v:>7.3f}" for k, v in rows.items())]))
    if summary.get("throughput", {}).get("redis_command_us_per_call_by_command"):
        parts.append(redis_time_table(summary["throughput"]))
    steps = summary.get("throughput", {}).get("redis_by_step", {}).get("steps") or {}
    if steps:
        parts.append(step_table(steps))
    curve = summary.get("scale-out", {}).get("curve") or {}
    if curve:
        parts.append(scale_out_table(curve))
    return "\n\n".join(parts)


def _with_stand_in(figures: dict[str, Any], figure: str) -> dict[str, float]:
    """The rows of ``figure``; by process, model_turn's is followed by its model stand-in's
    part, which a deployment with a real provider does not spend."""
    rows: dict[str, float] = {}
    stand_in = figures.get("stand_in_cpu_ms_per_call")
    for name, value in (figures.get(figure) or {}).items():
        rows[name] = value
        if name == "model_turn" and stand_in is not None:
            rows["  of it, the benchmark's model stand-in"] = stand_in
    return rows


def scale_out_table(curve: dict[str, dict[str, float]]) -> str:
    """Each executor count's rate beside Redis's share of a core and the executors' CPU."""
    head = f"  {'executors':>9} {'calls/s':>9} {'Redis core share':>17} {'executor ms/call':>17}"
    rows = [
        f"  {count:>9} {p['calls_per_s']:>9,.0f} {p['redis_cpu_share']:>17.2f} "
        f"{p['executor_cpu_ms_per_call']:>17.3f}"
        for count, p in curve.items()
    ]
    return "\n".join(["scale-out: executors on 50 ms tools", head, *rows])


REDIS_TIME_ROWS = 8


def redis_time_table(figures: dict[str, Any]) -> str:
    """Redis's own time by command (``INFO commandstats``), the largest first: a script's row
    holds the commands it ran too, which also have rows of their own."""
    usec = figures["redis_command_us_per_call_by_command"]
    counts = figures.get("redis_commands_per_call_by_command", {})
    head = f"  {'command':<22} {'µs/call':>10} {'calls/call':>10} {'µs each':>9}"
    rows = [
        f"  {name:<22} {us:>10.2f} {counts.get(name, 0.0):>10.3f} "
        f"{us / counts[name] if counts.get(name) else 0.0:>9.2f}"
        for name, us in list(usec.items())[:REDIS_TIME_ROWS]
    ]
    title = "Redis time by command, per tool call (EVALSHA includes the commands its steps ran)"
    return "\n".join([title, head, *rows])


def step_table(steps: dict[str, dict[str, Any]]) -> str:
    """Redis commands by ledger step: how often it runs per tool call, what one run costs."""
    head = f"  {'step':<22} {'runs/call':>10} {'cmds/run':>9} {'cmds/call':>10}"
    rows = [
        f"  {name:<22} {row['runs_per_call']:>10.2f} {row['commands_per_run']:>9.1f} "
        f"{row['commands_per_call']:>10.2f}"
        for name, row in steps.items()
    ]
    return "\n".join(["Redis commands by ledger step (a MONITOR-watched batch)", head, *rows])
