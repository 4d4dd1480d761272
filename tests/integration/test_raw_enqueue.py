"""The any-language contract: a run enqueued with a raw Redis client and no callgate code.

`raw_submitter.py` writes the ``start_run`` job exactly as `callgate.jobs` documents it
(canonical spec digest, an EdDSA JWT made with PyJWT from the local submitter's key file, arq's
job value, written create-only with its queue entry) in a process where ``import callgate``
fails.  Then the ingress runs in burst mode, the pipeline takes the run through its tool calls,
and the run completes, vouched for by that submitter; the kept result holds the spec but not the
token.  A job whose spec changed after signing creates no run.  (The same client under the
locked-down ``submitters`` login: test_queue_hijack.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from callgate.client import CallgateClient
from callgate.errors import JobFailedError
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec

SUBMITTER = Path(__file__).resolve().parent / "raw_submitter.py"
NO_CALLGATE = (
    "import runpy, sys; sys.modules['callgate'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
"""Run a script with ``import callgate`` made to fail."""


@pytest.fixture(scope="module")
def pipeline(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    """Every worker but the ingress (the test runs it in burst mode), the travel service and
    the scripted model."""
    spec = SystemSpec(
        services=("travel",),
        scripted_model=True,
        redis_url=redis_server.url,
        replicas={"ingress": 0, "reconciler": 0},
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        yield system


def raw_spec(**changes: Any) -> dict[str, Any]:
    return {
        "run_id": f"raw-{uuid.uuid4().hex[:12]}",
        "api": "openai-chat",
        "model": "travel-demo",
        "input": "Zug G1234 am 2026-12-20 — pünktlich? Und das Wetter in Hangzhou?",
        "identity": {"user": "alice", "roles": []},
        "allowed_tools": ["get_train_status", "get_weather"],
        "max_turns": 4,
        "deadline_s": 120.5,
        **changes,
    }


def submit_raw(
    system: LocalSystem, spec: dict[str, Any], signed: dict[str, Any], *, fresh: bool = True
) -> str:
    """Enqueue ``spec`` signed over ``signed`` (the same spec, unless a test tampers)."""
    key_file = Path(system.env["CALLGATE_HOME"]) / "keys" / "local.pem"
    argv = [
        sys.executable,
        "-c",
        NO_CALLGATE,
        str(SUBMITTER),
        system.env["REDIS_URL"],
        system.env["CALLGATE_KEY_PREFIX"],
        str(key_file),
        "local",
        json.dumps(signed),
    ]
    if spec != signed:
        argv.append(json.dumps(spec))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=system.env)
    assert done.returncode == (0 if fresh else 1), done.stdout + done.stderr
    return done.stdout.strip()


def run_ingress_burst(system: LocalSystem) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "callgate.services.ingress", "--burst"],
        capture_output=True,
        text=True,
        timeout=60,
        env=system.env,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def test_a_raw_job_starts_a_run_that_completes(pipeline: LocalSystem) -> None:
    spec = raw_spec()
    assert submit_raw(pipeline, spec, spec) == spec["run_id"]
    run_ingress_burst(pipeline)
    async with CallgateClient(pipeline.settings) as client:
        status = await client.wait(spec["run_id"], 30)
        view = await client.view(spec["run_id"])
    assert status["status"] == "completed", view
    assert status["vouched_by"] == "service:local"
    assert status["identity"]["user"] == "alice"
    assert [c["state"] for c in view["calls"]] == ["succeeded", "succeeded"]
    assert "on_time" in view["final_text"]
    kept = orjson.loads(await client.redis.get(f"arq:result:{spec['run_id']}"))
    assert kept["a"] == [{"spec": spec}], "a kept result holds no token"
    assert submit_raw(pipeline, spec, spec, fresh=False) == "already enqueued"


async def test_a_spec_changed_after_signing_creates_no_run(pipeline: LocalSystem) -> None:
    signed = raw_spec()
    sent = {**signed, "identity": {"user": "alice", "roles": ["travel_admin"]}}
    assert submit_raw(pipeline, sent, signed) == signed["run_id"]
    run_ingress_burst(pipeline)
    async with CallgateClient(pipeline.settings) as client:
        with pytest.raises(JobFailedError, match="spec changed after signing"):
            await client.wait(signed["run_id"], 10)
        assert await client.run(signed["run_id"]) is None
