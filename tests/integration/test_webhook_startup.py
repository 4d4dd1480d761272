"""A webhooks deployment that does not load stops before anything runs, in one line: the worker
process, and `callgate dev --webhooks`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

GOOD = {"name": "ops", "url": "https://ops.example.com/hook", "secret": "s" * 32}


def test_the_worker_will_not_start_with_a_bad_list_and_says_why_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "hooks.json"
    bad.write_text(orjson.dumps([{**GOOD, "secret": "short"}]).decode())
    env = {
        **os.environ,
        "CALLGATE_WEBHOOK_ENDPOINTS_FILE": str(bad),
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "callgate.services.webhooks"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs at least 16 bytes" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_dev_checks_the_webhooks_file_before_starting_anything(tmp_path: Path) -> None:
    bad = tmp_path / "hooks.json"
    bad.write_text(orjson.dumps([{**GOOD, "events": ["run.started"]}]).decode())
    done = subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "dev", "--webhooks", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CALLGATE_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 2
    assert "argument --webhooks" in done.stderr and "events" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "home" / "dev.json").exists(), "nothing started"
