"""`callgate bench --scenario throughput-cluster`: every leg (one node, the private cluster
without and with ``replica`` durability) completes its calls each repeat, and the report has
its medians, ranges and ratios.  Tiny sizes; nothing is timed."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from callgate.ops.bench import cluster, throughput
from callgate.ops.embedded_redis import EmbeddedRedis

RUNS, REPEATS = 2, 2
BENCH = [sys.executable, "-m", "callgate.ops.cli", "bench"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_leg_completes_its_calls_in_each_repeat(redis_server: EmbeddedRedis) -> None:
    argv = [*BENCH, "--scenario", cluster.NAME, "--json", "--redis-url", redis_server.url]
    argv += ["--runs", str(RUNS), "--repeats", str(REPEATS)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = orjson.loads(done.stdout)["scenarios"][cluster.NAME]

    assert len(set(figures["partition_masters"])) == cluster.PARTITIONS  # a master each
    calls = RUNS * throughput.TURNS * throughput.CALLS_PER_TURN
    for leg, (on_cluster, durability) in cluster.LEGS.items():
        samples = figures["legs"][leg]
        assert [s["calls"] for s in samples] == [calls] * REPEATS, leg
        assert all(("redis_commands_per_call" in s) is not on_cluster for s in samples), leg
        waited = [s["waits_per_call"] > 0 for s in samples]
        assert waited == [durability == "replica"] * REPEATS, leg
        low, high = figures[f"{leg}_calls_per_s_range"]
        assert 0 < low <= figures[f"{leg}_calls_per_s"] <= high, leg
    for ratio in ("cluster_vs_one_node", "replica_vs_none"):
        low, high = figures[f"{ratio}_range"]
        assert 0 < low <= figures[ratio] <= high, ratio
    assert f"{cluster.NAME} (cluster_replica, {REPEATS}/{REPEATS})" in done.stderr


@pytest.mark.parametrize(
    "option",
    [["--repeats", "0"], ["--repeats", "two"], ["--redis-url", "redis+cluster://127.0.0.1:7000"]],
)
def test_a_bad_option_is_one_line_and_exit_2(option: list[str]) -> None:
    done = subprocess.run(
        [*BENCH, "--scenario", cluster.NAME, *option], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
