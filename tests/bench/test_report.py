"""The benchmark's pure reporting: percentiles, targets against their bounds, the table."""

from __future__ import annotations

import math

from callgate.ops.bench.report import (
    TARGETS,
    percentile,
    recovery_summary,
    redis_time_table,
    step_breakdown,
    table,
    targets,
)


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 50) == 50.0
    assert percentile(samples, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
    assert math.isnan(percentile([], 50))


def _summary(**changes: float) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {
        "latency": {"in_process_p50_vs_floor": 1.5},
        "throughput": {
            "calls_per_s": 1600.0,
            "redis_commands_per_call": 54.0,
            "redis_cpu_us_per_call": 110.0,
        },
        "throughput-aof": {"always_vs_everysec": 0.8},
        "executors": {"one_calls_per_s": 900.0, "two_vs_one": 1.2},
        "scale-out": {"8_vs_4": 1.6},
        "recovery": {"p50_s": 1.5, "max_s": 6.0},
        "memory": {
            "bytes_per_run": 20_480.0,
            "keys_left_after_retention": 0,
            "rss_growth_max": 0.2,
        },
        "cases": {"seconds": 31.0},
    }
    for name, value in changes.items():
        scenario, figure = TARGETS[name].figure.split(".")
        summary[scenario][figure] = value
    return summary


def test_every_target_has_value_bound_and_verdict() -> None:
    met = targets(_summary())
    assert set(met) == set(TARGETS)
    assert {name for name, entry in met.items() if not entry["met"]} == {
        "executor_1proc_calls_per_s",
        "recovery_max_s",
        "rss_growth",
        "redis_commands_per_call",
        "aof_always_vs_everysec",
        "cases_run_s",
    }
    assert met["cases_run_s"] == {"value": 31.0, "target": "<= 30", "met": False}
    assert met["redis_bytes_per_run"] == {"value": 20_480.0, "target": "<= 20480", "met": True}
    assert met["throughput_calls_per_s"]["target"] == ">= 1500"


def test_a_missing_figure_is_never_met_and_skipped_scenarios_have_no_target() -> None:
    summary = _summary(round_trip_p50_vs_floor=math.nan)
    del summary["memory"]
    met = targets(summary)
    assert met["round_trip_p50_vs_floor"]["met"] is False
    assert "rss_growth" not in met and "redis_bytes_per_run" not in met


def test_table_shows_figures_with_their_verdicts() -> None:
    summary = {"recovery": recovery_summary([1.2, 4.0, 1.8])}
    text = table(summary, targets(summary))
    lines = text.splitlines()
    assert lines[0].startswith("figure")
    assert any(
        "recovery after SIGKILL p50 (s)" in line and "1.800" in line and "yes" in line
        for line in lines
    )
    assert any("max" in line and "4.000" in line for line in lines)
    assert "latency" not in text and "throughput" not in text


def test_step_breakdown_averages_the_gaps_between_commits() -> None:
    def turn(start: int) -> list[tuple[str, str, str]]:
        return [
            (f"{start}-0", "model.response", ""),
            (f"{start}-1", "call.created", ""),
            (f"{start + 1}-0", "call.transition", "allowed"),
            (f"{start + 3}-0", "call.transition", "executing"),
            (f"{start + 4}-0", "call.transition", "succeeded"),
            (f"{start + 6}-0", "run.transition", "awaiting_model"),
        ]

    events = turn(1000) + turn(1010) + turn(1022)
    steps = step_breakdown(events)
    assert list(steps.values()) == [(4 + 6) / 2, 1, 2, 1, 2]
    assert next(iter(steps)).startswith("model_turn: turn message read")


def test_redis_time_table_lists_the_costliest_commands_first_with_their_time_each() -> None:
    figures = {
        "redis_command_us_per_call_by_command": {"evalsha": 100.0, "hset": 9.0, "xack": 1.5},
        "redis_commands_per_call_by_command": {"hset": 6.0, "evalsha": 0.25, "xack": 0.2},
    }
    lines = redis_time_table(figures).splitlines()
    assert lines[0].startswith("Redis time by command")
    rows = [line.split() for line in lines[2:]]
    assert rows == [
        ["evalsha", "100.00", "0.250", "400.00"],
        ["hset", "9.00", "6.000", "1.50"],
        ["xack", "1.50", "0.200", "7.50"],
    ]
