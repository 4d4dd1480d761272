"""A tracing setting callgate cannot honour stops a worker at start with one line and exit 2
(README "Tracing"), before it touches Redis."""

from __future__ import annotations

import os
import subprocess
import sys

from callgate.streams.service import START_FAILED


def _executor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate.services.executor", "--burst"],
        env={**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0", **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def test_a_grpc_exporter_is_refused_at_start_in_one_line() -> None:
    done = _executor({"CALLGATE_TRACING": "1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert done.returncode == START_FAILED
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'" in lines[0]
    assert "Traceback" not in done.stderr
