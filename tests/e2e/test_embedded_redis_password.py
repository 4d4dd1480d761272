"""Attack 9 of issue #31: the embedded Redis that `callgate up`, `dev` and `demo` start had no
password, so any local user of a shared host could connect to its port and hold the workers'
power.  It now has a generated one, kept only in the children's environment and the 0600
``HOME/dev.json``, through which a later `callgate run`/`runs`/`status` in another terminal
still finds the deployment with nothing exported; no output or log line shows it."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest
import redis

from callgate.ops.embedded_redis import free_port
from callgate.ops.stack import WORKERS
from callgate.ops.system import LocalSystem, SystemSpec
from tests.e2e.test_dev import CLI, callgate, fresh_terminal, readme_run_commands, wait_for

pytestmark = pytest.mark.slow


def attacker_without_password(port: int) -> None:
    """Another local user: the port is open to them, the password is not."""
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, socket_timeout=5).xadd("cg:{p0}:exec", {"d": b"forged"})


def test_the_embedded_redis_refuses_a_client_without_the_password() -> None:
    said: list[str] = []
    spec = SystemSpec(services=(), scripted_model=False, redis="private",
                      replicas=dict.fromkeys(WORKERS, 0))  # fmt: skip
    with LocalSystem(spec, progress=said.append) as system:
        assert system.redis is not None and system.redis.process is not None
        attacker_without_password(system.redis.port)
        password = urlsplit(system.env["REDIS_URL"]).password
        assert password and len(password) >= 32
        assert redis.Redis.from_url(system.env["REDIS_URL"]).ping()
        cmdline = Path(f"/proc/{system.redis.process.pid}/cmdline").read_bytes()
        assert password.encode() not in cmdline, "every local user can read a command line"
        assert said and not [line for line in said if password in line]


@pytest.fixture(params=["up", "dev"])
def started(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """`callgate up` or `dev` with no Redis answering at REDIS_URL: its own embedded one."""
    home, log = tmp_path / "home", tmp_path / "out.log"
    env = {**fresh_terminal(home), "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with log.open("wb") as out:
        process = subprocess.Popen([*CLI, request.param, "--grace", "3"], env=env, cwd=tmp_path,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=out)  # fmt: skip
    try:
        wait_for(home / "dev.json", process, log, 60)
        yield home, log
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
        assert not (home / "dev.json").exists(), "the state file outlives a clean exit"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_only_the_state_file_holds_the_password_and_other_terminals_find_it(
    started: tuple[Path, Path],
) -> None:
    home, log = started
    state_file = home / "dev.json"
    assert state_file.stat().st_mode & 0o077 == 0
    url = urlsplit(orjson.loads(state_file.read_bytes())["redis_url"])
    assert url.port is not None
    attacker_without_password(url.port)
    assert url.password
    runs = callgate(home, "runs")  # a later terminal, nothing exported
    assert runs.returncode == 0, runs.stdout + runs.stderr
    if "model" in orjson.loads(state_file.read_bytes())["urls"]:  # `dev`: README's run
        ran = callgate(home, *readme_run_commands()[0])
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert orjson.loads(ran.stdout)["status"] == "completed"
    assert url.password not in log.read_text() + runs.stdout + runs.stderr


def test_the_demo_runs_end_to_end_on_its_own_embedded_redis(tmp_path: Path) -> None:
    env = {**fresh_terminal(tmp_path / "home"), "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    demo = subprocess.run([*CLI, "demo", "travel", "--api", "openai-chat", "--timeout", "45"],
                          env=env, capture_output=True, text=True, timeout=90)  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "starting an embedded Redis" in demo.stderr and "status: completed" in demo.stdout
    shown = re.findall(r"redis://default:([^@\s]*)@", demo.stdout + demo.stderr)
    assert shown and set(shown) == {"[redacted]"}
