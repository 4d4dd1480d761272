"""``callgate conformance`` as a user runs it: a real process tree, JSON on stdout, progress on
stderr, the exit code — on a slice of the matrix (the whole matrix runs in test_matrix)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
import redis

from callgate.ops.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.timeout(180)
FIELDS = ["case", "api", "passed", "expected_state", "actual_state", "executions",
          "pairing_ok", "external_effect", "detail"]  # fmt: skip


def _callgate(*args: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "CALLGATE_KEY_PREFIX": "must-not-be-used"}
    # A real provider endpoint and key in the environment must not be used.
    env.update(OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="sk-not-a-real-key")
    return subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "conformance", *args],
        env=env, capture_output=True, text=True, timeout=150,
    )  # fmt: skip


def test_json_slice_passes_with_exactly_the_promised_shape(redis_server: EmbeddedRedis) -> None:
    done = _callgate("--api", "anthropic-messages", "openai-chat", "--case", "refusal",
                     "--case", "approval", "--json", redis_url=redis_server.url)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cells = orjson.loads(done.stdout)["cells"]
    assert [(c["case"], c["api"]) for c in cells] == [
        ("approval", "openai-chat"), ("approval", "anthropic-messages"),
        ("refusal", "openai-chat"), ("refusal", "anthropic-messages"),
    ]  # fmt: skip
    assert all(list(c) == FIELDS and c["passed"] and c["detail"] == "" for c in cells)
    assert cells[0]["executions"] == {"reserve_seat": 1} and cells[0]["external_effect"]
    assert cells[0]["actual_state"] == "paused_approval → completed"
    assert "[4/4] ✓" in done.stderr  # progress goes to stderr, not into the JSON
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.keys("must-not-be-used*") == []  # a fresh key prefix, always


def test_an_unknown_case_is_a_usage_error(redis_server: EmbeddedRedis) -> None:
    done = _callgate("--case", "nope", redis_url=redis_server.url)
    assert done.returncode == 2 and "invalid choice: 'nope'" in done.stderr
