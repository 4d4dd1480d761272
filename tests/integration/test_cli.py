"""`callgate` commands against a real private Redis: run → status / view / trace, and the
travel demo end to end as a real process tree (scripted model, travel service, every worker)."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys

import orjson
import pytest

from callgate.config import Settings
from callgate.ops.cli import main
from callgate.services.ingress import queues
from callgate.streams.arq import create_worker


def _drain(settings: Settings) -> None:
    async def run() -> None:
        worker = create_worker(settings, queues(settings)[0], "ingress", burst=True)
        try:
            await asyncio.wait_for(worker.async_run(), timeout=20)
        finally:
            await worker.close()

    asyncio.run(run())


def test_run_status_view_trace(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    code = main(
        [
            "run",
            "--api",
            "anthropic-messages",
            "--model",
            "m",
            "--tools",
            "get_train_status,get_weather",
            "--identity",
            '{"user": "alice"}',
            "--input",
            "hi",
            "--max-turns",
            "3",
            "--json",
        ]
    )
    assert code == 0
    run_id = orjson.loads(capsys.readouterr().out)["run_id"]
    _drain(settings)

    assert main(["status", run_id, "--json"]) == 0
    status = orjson.loads(capsys.readouterr().out)
    assert (status["status"], status["max_turns"], status["api"]) == (
        "awaiting_model",
        3,
        "anthropic-messages",
    )
    assert main(["view", run_id, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["calls"] == []
    assert main(["trace", run_id]) == 0
    out = capsys.readouterr().out
    assert "run.created" in out and "→awaiting_model" in out

    assert main(["status", "nope"]) == 3
    assert capsys.readouterr().err == "callgate: no run nope\n"
    with pytest.raises(SystemExit):
        main(["run", "--api", "openai-chat", "--model", "m", "--identity", "[]", "--input", "x"])


def test_demo_travel_end_to_end(settings: Settings) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
            "CALLGATE_KEY_PREFIX",
        }
    }
    env["REDIS_URL"] = settings.redis_url
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "callgate.ops.cli",
            "demo",
            "travel",
            "--api",
            "openai-chat",
            "--timeout",
            "45",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "get_train_status" in proc.stdout and "get_weather" in proc.stdout
    assert "executing→succeeded" in proc.stdout
    assert "status: completed" in proc.stdout
    assert '"status":"on_time"' in proc.stdout and "light rain" in proc.stdout
    assert "scripted model server" in proc.stderr and "stopping" in proc.stderr
    assert "scripted-local" not in proc.stdout


def _demo_env(settings: Settings) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
            "CALLGATE_KEY_PREFIX",
            "CALLGATE_APPROVERS",
        }
    }
    env["REDIS_URL"] = settings.redis_url
    return env


def test_demo_workshop_asks_in_the_terminal_and_books_once(settings: Settings) -> None:
    """The approval is asked at a real terminal (a pty on stdin); typed answers decide it."""
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "callgate.ops.cli",
                "demo",
                "workshop",
                "--api",
                "anthropic-messages",
                "--timeout",
                "45",
            ],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_demo_env(settings),
        )
        os.write(primary, b"y\ncarol\n")  # held by the terminal until the demo asks
        out, err = proc.communicate(timeout=90)
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == 0, err[-3000:]
    assert "Approve this call? [y/N]" in out and "Decide as [carol]" in out
    assert "reserve_seat" in err and "approved apr_" in err
    assert "needs_approval→approved" in out and "executing→succeeded" in out
    assert "status: completed" in out
    assert "booking service: 1 reservation(s): ws-101/p-alice ×1" in out


def test_demo_workshop_without_a_terminal_needs_approve_as(settings: Settings) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "demo", "workshop", "--timeout", "45"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_demo_env(settings),
        timeout=90,
    )
    assert proc.returncode == 1
    assert "pass --approve-as USER" in proc.stderr
