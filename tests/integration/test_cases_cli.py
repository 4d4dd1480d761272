"""`callgate cases` with a person's mistakes: each is one line on stderr, no traceback, and the
exit code the command documents (a bad case file 2, no such run or one still moving 3)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.cli import main
from tests.integration.helpers import drain


@pytest.fixture
def deployment(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", ",".join(settings.tool_modules))
    return settings


def _line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def test_a_missing_or_foreign_case_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cases", "run", str(tmp_path / "nope")]) == 2
    assert _line(capsys) == f"callgate: {tmp_path / 'nope'}: no such file or folder"
    assert main(["cases", "run", str(tmp_path)]) == 2
    assert _line(capsys) == f"callgate: {tmp_path}: no *.json case files in it"
    (tmp_path / "other.json").write_text('{"format": "callgate-case/9"}')
    assert main(["cases", "run", str(tmp_path)]) == 2
    assert _line(capsys).startswith(f"callgate: {tmp_path / 'other.json'}: not a case file: ")


def test_exporting_no_such_run_or_one_still_moving_is_exit_3(
    deployment: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cases", "export", "nope", "--out", str(tmp_path)]) == 3
    assert _line(capsys) == "callgate: no run nope"

    async def queued() -> str:
        async with CallgateClient(deployment) as client:
            spec = {"api": "openai-chat", "model": "m", "input": "hi", "allowed_tools": []}
            return await client.submit({**spec, "identity": {"user": "alice"}})

    run_id = asyncio.run(queued())
    asyncio.run(drain(deployment))  # the ingress creates it; no model turn takes it on
    assert main(["cases", "export", run_id, "--out", str(tmp_path)]) == 3
    assert _line(capsys) == (
        f"callgate: run {run_id} is awaiting_model: export it once it is paused or has ended"
    )
    assert not list(tmp_path.iterdir())
