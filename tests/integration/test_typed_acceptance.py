"""Attack 7 of issue #31: an acceptance rule of the wrong shape (``{"contains": [1]}``) used to
be accepted, the run's tools ran, and the run dead-lettered at its end after asking the model
five times.  The rule is typed in the `RunSpec`, so it is refused at submit, by each door: the
CLI (one line, exit 2), the client (`RunSpecError`) and the ingress, for a raw job signed by a
real submitter without callgate's client (no run is created)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.errors import JobFailedError, RunSpecError
from callgate.ops.cli import main
from tests.integration.test_raw_enqueue import NO_CALLGATE, SUBMITTER, raw_spec

BAD_RULE = {"contains": [1]}
EXPECTED = "acceptance.contains.0: Input should be a valid string"


def test_callgate_run_refuses_it_in_one_line_exit_2(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", settings.key_prefix)
    monkeypatch.setenv("CALLGATE_TOOL_MODULES", ",".join(settings.tool_modules))
    code = main(["run", "--api", "openai-chat", "--model", "final-answer", "--input", "hi",
                 "--identity", '{"user": "alice"}', "--tools", "get_weather",
                 "--acceptance", json.dumps(BAD_RULE)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"callgate: invalid run spec: {EXPECTED}\n"


async def test_the_client_raises_run_spec_error(settings: Settings) -> None:
    async with CallgateClient(settings) as client:
        with pytest.raises(RunSpecError, match=re.escape(EXPECTED)):
            await client.submit(
                {
                    "api": "openai-chat",
                    "model": "final-answer",
                    "input": "hi",
                    "identity": {"user": "alice"},
                    "acceptance": BAD_RULE,
                }
            )
        assert await client.redis.keys(f"{settings.key_prefix}*") == []


async def test_the_ingress_refuses_a_raw_job_with_it_and_creates_no_run(
    settings: Settings, subprocess_env: dict[str, str], callgate_home: Path
) -> None:
    spec = raw_spec(run_id=f"raw-{uuid.uuid4().hex[:12]}", acceptance=BAD_RULE)
    env = {**subprocess_env, "CALLGATE_HOME": str(callgate_home)}
    argv = [sys.executable, "-c", NO_CALLGATE, str(SUBMITTER), settings.redis_url,
            settings.key_prefix, str(callgate_home / "keys" / "local.pem"), "local",
            json.dumps(spec)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    burst = subprocess.run([sys.executable, "-m", "callgate.services.ingress", "--burst"],
                           capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert burst.returncode == 0, burst.stdout + burst.stderr
    async with CallgateClient(settings) as client:
        with pytest.raises(JobFailedError, match=re.escape(EXPECTED)):
            await client.wait(spec["run_id"], 10)
        assert await client.run(spec["run_id"]) is None
