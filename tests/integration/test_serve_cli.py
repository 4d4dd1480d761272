"""`callgate serve` refuses to start, in one line and exit code 1, when it could not sign what it
relays (no submitter key, no delegate key), and says a bad port is a usage error (2); a Redis
that does not answer is a 503 problem for the caller, not a traceback."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from callgate.api import create_app
from callgate.api.settings import ApiSettings
from callgate.auth.keyring import LocalKeyring
from callgate.auth.tokens import sign_access
from callgate.config import Settings
from callgate.ops.cli import main
from callgate.ops.embedded_redis import EmbeddedRedis, free_port


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CALLGATE_HOME", str(home))
    monkeypatch.setenv("CALLGATE_TRUST_FILE", str(home / "trust.json"))
    monkeypatch.delenv("CALLGATE_SIGNING_KEY", raising=False)
    return home


def test_serve_without_keys_says_which_and_exits_1(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "callgate keys new local" in err
    LocalKeyring(home).ensure({}, {})  # the submitter's key, but no delegate key `api`
    assert main(["serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "callgate keys new api" in err and "Traceback" not in err


def test_a_port_out_of_range_is_a_usage_error(home: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "70000"])
    assert exited.value.code == 2


async def test_redis_down_is_a_503_problem_not_a_traceback(callgate_home: Path) -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", key_prefix="down")
    app = create_app(settings, ApiSettings(delegate="slack"))  # a delegate key the session has
    token = sign_access(LocalKeyring(callgate_home).signer("carol"))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api,
    ):
        answer = await api.get("/runs/run-x", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert "try again shortly" in answer.json()["detail"] and "Traceback" not in answer.text


def test_a_client_may_connect_the_moment_serve_says_it_listens(
    callgate_home: Path, redis_server: EmbeddedRedis
) -> None:
    """`callgate serve` prints its URL before its start-up (trust file, Redis) is done; a
    connection made as soon as the line is read must wait in the backlog, not be refused."""
    env = {**os.environ, "REDIS_URL": redis_server.url, "CALLGATE_API_DELEGATE": "slack"}
    server = subprocess.Popen(
        [sys.executable, "-m", "callgate.ops.cli", "serve", "--port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"listening on http://([\d.]+):(\d+)", line)
        assert found is not None, line
        with socket.create_connection((found.group(1), int(found.group(2))), timeout=10):
            pass
    finally:
        server.terminate()
        server.wait(timeout=10)
