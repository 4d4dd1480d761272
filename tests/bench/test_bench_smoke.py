"""`callgate bench --smoke`: every scenario runs end to end with real processes on the test's
private Redis, and reports every figure and every target.  Tiny sizes; nothing here is timed,
so no threshold can flake."""

from __future__ import annotations

import math
import subprocess
import sys

import orjson
import pytest
import redis

from callgate.ops.bench.report import TABLE_ROWS, TARGETS
from callgate.ops.embedded_redis import EmbeddedRedis

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMOKE_TIMEOUT_S = 240
"""A guard against a hang, not a speed limit: about 60 s on a quiet 2-core VM, 115 s on a
slower one (each scenario starts its own worker processes)."""


def test_smoke_run_reports_every_figure_and_target(redis_server: EmbeddedRedis) -> None:
    argv = [
        sys.executable,
        "-m",
        "callgate.ops.cli",
        "bench",
        "--smoke",
        "--json",
        "--redis-url",
        redis_server.url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    document = orjson.loads(done.stdout)

    scenarios = document["scenarios"]
    for scenario, figure, _ in TABLE_ROWS:
        value = scenarios[scenario][figure]
        assert isinstance(value, int | float) and not math.isnan(value), (scenario, figure)
    assert set(document["targets"]) == set(TARGETS)
    redis_time = scenarios["throughput"]["redis_command_us_per_call_by_command"]
    assert redis_time["evalsha"] > 0 and list(redis_time.values()) == sorted(
        redis_time.values(), reverse=True
    )
    stolen = document["machine"]["cpu_stolen_share"]
    assert stolen is None or 0 <= stolen <= 1
    assert document["machine"]["python_loop_s"] > 0
    for name, entry in document["targets"].items():
        assert set(entry) == {"value", "target", "met"}, name
        assert isinstance(entry["met"], bool), name
    # The benchmark left nothing of its own behind on the Redis it was given.
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert list(client.scan_iter("cgbench*")) == []
    finally:
        client.close()
