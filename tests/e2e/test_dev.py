"""`callgate dev` as a user runs it: one process starts everything, and README's `callgate run`
in another terminal, with nothing exported, finds that deployment through ``HOME/dev.json``."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from callgate.ops.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "callgate.ops.cli"]
NOT_EXPORTED = (
    "REDIS_URL",
    "CALLGATE_KEY_PREFIX",
    "CALLGATE_TRUST_FILE",
    "CALLGATE_TOOL_MODULES",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)
"""What a fresh terminal does not have."""


def readme_run_commands() -> list[list[str]]:
    """README's `callgate run … --model travel-parallel …` examples, as their arguments."""
    readme = (ROOT / "README.md").read_text()
    found = re.finditer(
        r"callgate run --api openai-chat --model travel-parallel(?:\\\n|[^\n])*", readme
    )
    commands = []
    for match in found:
        words = shlex.split(match.group(0).replace("\\\n", " "))
        commands.append([*words[1:], *(["--json"] if "--json" not in words else [])])
    assert commands, "README shows no `callgate run` of travel-parallel"
    return commands


def fresh_terminal(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NOT_EXPORTED}
    return {**env, "CALLGATE_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def wait_for(path: Path, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"dev exited {process.returncode}: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {path.name}: {log.read_text()}"
        time.sleep(0.1)


@pytest.fixture
def dev(redis_server: EmbeddedRedis, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A running `callgate dev` on the session's Redis with a fresh prefix; (home, its log)."""
    home, log = tmp_path / "home", tmp_path / "dev.log"
    env = {
        **fresh_terminal(home),
        "REDIS_URL": redis_server.url,
        "CALLGATE_KEY_PREFIX": f"dev{uuid.uuid4().hex[:8]}",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*CLI, "dev", "--grace", "3"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        wait_for(home / "dev.json", process, log, 60)
        yield home, log
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
        assert not (home / "dev.json").exists(), "dev.json outlives a clean exit"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def logged(log: Path, pattern: str, timeout_s: float = 10) -> str:
    """The first group of ``pattern`` once dev's log shows it."""
    deadline = time.monotonic() + timeout_s
    while (found := re.search(pattern, log.read_text())) is None:
        assert time.monotonic() < deadline, f"dev never logged {pattern!r}: {log.read_text()}"
        time.sleep(0.1)
    return found.group(1)


def callgate(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=fresh_terminal(home),
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
    )


def test_readme_run_finds_the_dev_deployment_with_nothing_exported(
    dev: tuple[Path, Path], redis_server: EmbeddedRedis
) -> None:
    home, log = dev
    state = orjson.loads((home / "dev.json").read_bytes())
    assert (home / "dev.json").stat().st_mode & 0o077 == 0, "the URL may carry a password"
    assert state["redis_url"] == redis_server.url and state["key_prefix"].startswith("dev")
    assert {"model", "travel", "booking", "api"} <= set(state["urls"])
    assert state["env"]["OPENAI_BASE_URL"] == state["urls"]["model"] + "/v1"
    link = logged(log, r"(http://[^\s\"]+/console/login\?token=[A-Za-z0-9_-]{16,})")
    assert link.startswith(state["urls"]["api"] + "/console/login?token=")
    first, again = httpx.get(link), httpx.get(link)
    assert first.status_code == 303, (link, first.text[-300:], log.read_text()[-3000:])
    assert "callgate_session=" in first.headers["set-cookie"]
    assert again.status_code == 401, "the console's login link works once"

    for command in readme_run_commands():
        ran = callgate(home, *command)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        view = orjson.loads(ran.stdout)
        assert view["status"] == "completed", view
        assert "G1234" in view["final_text"]

    status = callgate(home, "status", view["run_id"])  # a table or JSON: either names both
    assert status.returncode == 0, status.stderr
    assert view["run_id"] in status.stdout and "completed" in status.stdout

    ready = [orjson.loads(line) for line in log.read_text().splitlines() if '"ready"' in line]
    assert ready and ready[0]["service"] == "dev", "not a terminal: the banner is a JSON line"


def test_a_second_dev_in_the_same_home_refuses(dev: tuple[Path, Path]) -> None:
    home, _ = dev
    second = callgate(home, "dev")
    assert second.returncode == 1
    assert "already runs" in second.stderr and "Traceback" not in second.stderr
    assert (home / "dev.json").exists(), "the refused one must not remove the first one's file"
