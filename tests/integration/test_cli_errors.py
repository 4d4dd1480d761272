"""`callgate` failures a person can fix: each is one ``…: what — what to do`` line on stderr,
no traceback, no password, and the exit code `callgate --help` documents (Redis down 5, no
such run 3, usage 2); against a real private Redis or a port nothing listens on."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import orjson
import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.cli import main
from callgate.ops.embedded_redis import free_port
from callgate.ops.exits import CONTRACT
from tests.integration.helpers import drain

RUN = ["run", "--api", "openai-chat", "--model", "m", "--identity", '{"user": "alice"}']
PASSWORD = "s3cret-pw"


@pytest.fixture
def deployment(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The CLI pointed at the test's Redis and prefix, with the test deployment's tools."""
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", ",".join(settings.tool_modules))
    return settings


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err.rstrip("\n")


def _usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    return _one_line(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "r-1"],
        ["view", "r-1"],
        ["trace", "r-1"],
        ["runs"],
        ["dead-letters"],
        ["approvals"],
        ["inbox"],
        [*RUN, "--input", "hi", "--tools", "get_weather"],
    ],
    ids=lambda argv: argv[0],
)
def test_redis_down_is_one_line_exit_5_without_the_password(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://workers:{PASSWORD}@127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("REDIS_URL", url)
    monkeypatch.delenv("CALLGATE_TOOL_MODULES", raising=False)
    assert main(argv) == 5
    masked = url.replace(PASSWORD, "[redacted]")
    assert _one_line(capsys) == (
        f"callgate: cannot reach Redis at {masked} — start it, or `callgate up`/set REDIS_URL"
    )


@pytest.mark.parametrize("command", ["status", "view", "trace"])
def test_an_unknown_run_is_one_line_exit_3(
    command: str, deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "nope"]) == 3
    assert _one_line(capsys) == "callgate: no run nope"
    assert main([command, "nope", "--json"]) == 3
    assert capsys.readouterr().out == ""


def test_no_registered_tools_is_refused_unless_allowed(
    deployment: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", "")
    assert main([*RUN, "--input", "hi"]) == 2
    assert _one_line(capsys) == (
        "callgate: no tools are registered (CALLGATE_TOOL_MODULES is empty): every tool call "
        "of this run would be refused — register tool modules, or pass --allow-no-tools"
    )
    assert main([*RUN, "--input", "hi", "--allow-no-tools"]) == 0
    assert capsys.readouterr().out.startswith("run-")


def test_tools_that_select_nothing_registered_are_refused(
    deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*RUN, "--input", "hi", "--tools", "callgate.standins.demo.travel"]) == 2
    assert _one_line(capsys).startswith(
        "callgate: --tools takes tool names, not modules: callgate.standins.demo.travel — "
    )
    assert main([*RUN, "--input", "hi", "--tools", "get_weather,teleport"]) == 2
    line = _one_line(capsys)
    assert line.startswith("callgate: --tools names tools not registered: teleport (registered: ")
    assert line.endswith(" — pick registered names, or pass --allow-no-tools")


def test_input_from_a_file_or_stdin_and_an_oversized_one(
    deployment: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task = tmp_path / "task.txt"
    task.write_text("Is G1234 on time?\n" + "context line\n" * 5_000, encoding="utf-8")
    assert main([*RUN, "--tools", "get_train_status", "--input-file", str(task), "--json"]) == 0
    from_file = orjson.loads(capsys.readouterr().out)["run_id"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin"))
    assert main([*RUN, "--input", "-", "--json"]) == 0
    from_stdin = orjson.loads(capsys.readouterr().out)["run_id"]
    asyncio.run(drain(deployment))
    assert main(["status", from_file, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["input"] == task.read_text(encoding="utf-8")
    assert main(["status", from_stdin, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["input"] == "from stdin"

    big = tmp_path / "big.txt"
    big.write_text("x" * 200_001, encoding="utf-8")
    assert _usage([*RUN, "--input-file", str(big)], capsys) == (
        f"callgate run: argument --input-file: {big} has 200,001 characters; a run's input "
        "holds at most 200,000 (see `callgate run --help`)"
    )
    assert _usage([*RUN, "--input-file", str(tmp_path / "missing.txt")], capsys).startswith(
        f"callgate run: argument --input-file: cannot read {tmp_path / 'missing.txt'}: "
    )


def test_bad_flags_are_one_line_exit_2(
    deployment: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _usage([*RUN[:-1], "[]", "--input", "x"], capsys) == (
        "callgate run: argument --identity: must be a JSON object (see `callgate run --help`)"
    )
    (tmp_path / "f").write_text("y", encoding="utf-8")
    assert _usage([*RUN, "--input", "x", "--input-file", str(tmp_path / "f")], capsys) == (
        "callgate run: argument --input-file: not allowed with argument --input "
        "(see `callgate run --help`)"
    )
    assert _usage(["runs", "--limit", "0"], capsys) == (
        "callgate runs: argument --limit: '0' is not a whole number ≥ 1 "
        "(see `callgate runs --help`)"
    )
    assert _usage(["runs", "--status", "done"], capsys).startswith(
        "callgate runs: argument --status: unknown status 'done' (one of queued, "
    )
    assert _usage(["nosuch"], capsys).startswith("callgate: argument command: invalid choice")
    assert main([*RUN, "--input", "x", "--max-turns", "0"]) == 2
    assert _one_line(capsys).startswith("callgate: invalid run spec: max_turns: ")


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    assert CONTRACT in capsys.readouterr().out
    assert "4  paused waiting for a person" in CONTRACT
    assert "5  cannot reach Redis" in CONTRACT


def test_requeueing_what_is_no_dead_letter_is_one_line_exit_3(
    deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["requeue", "1-1"]) == 3
    assert _one_line(capsys) == "callgate: no dead letter 1-1"


def test_a_missing_or_foreign_case_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cases", "run", str(tmp_path / "nope")]) == 2
    assert _one_line(capsys) == f"callgate: {tmp_path / 'nope'}: no such file or folder"
    assert main(["cases", "run", str(tmp_path)]) == 2
    assert _one_line(capsys) == f"callgate: {tmp_path}: no *.json case files in it"
    (tmp_path / "other.json").write_text('{"format": "callgate-case/9"}')
    assert main(["cases", "run", str(tmp_path)]) == 2
    assert _one_line(capsys).startswith(f"callgate: {tmp_path / 'other.json'}: not a case file: ")


def test_exporting_no_such_run_or_one_still_moving_is_exit_3(
    deployment: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cases", "export", "nope", "--out", str(tmp_path)]) == 3
    assert _one_line(capsys) == "callgate: no run nope"

    async def queued() -> str:
        async with CallgateClient(deployment) as client:
            spec = {"api": "openai-chat", "model": "m", "input": "hi", "allowed_tools": []}
            return await client.submit({**spec, "identity": {"user": "alice"}})

    run_id = asyncio.run(queued())
    asyncio.run(drain(deployment))  # the ingress creates it; no model turn takes it on
    assert main(["cases", "export", run_id, "--out", str(tmp_path)]) == 3
    assert _one_line(capsys) == (
        f"callgate: run {run_id} is awaiting_model: export it once it is paused or has ended"
    )
    assert not list(tmp_path.iterdir())
