"""A refused submission in a real ingress worker's log: one warning with the reason, never arq's
ERROR with a traceback (issue 34).

The ingress runs as its own process (``python -m callgate.services.ingress``) on the session's
Redis; jobs are enqueued as any submitter may write them: one signed by a key the trust file
does not know, one with no signature, one whose spec selects a tool the deployment does not
register, and one that reuses a run id for another spec.  Each fails its job (the result tells
the submitter why) and is logged exactly once, as a structured warning naming the job and the
reason; nothing in the log is an error or a traceback.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import redis.asyncio as aioredis
from arq.connections import ArqRedis

from callgate.auth.keys import new_private_key
from callgate.auth.tokens import Signer, sign_submission
from callgate.jobs import START_RUN
from tests.integration.helpers import new_run_id
from tests.seed import run_spec, signed_job


async def _result(redis: aioredis.Redis, run_id: str) -> dict[str, object]:
    """The job's kept result once the ingress wrote it."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        raw = await redis.get(f"arq:result:{run_id}")
        if raw is not None:
            return dict(orjson.loads(raw))
        await asyncio.sleep(0.05)
    raise AssertionError(f"the ingress never settled {run_id}")


async def _refuse_four_ways(pool: ArqRedis, redis: aioredis.Redis) -> dict[str, str]:
    """Enqueue the four refused jobs; run id → the error each job's result names."""
    stranger = Signer("stranger", new_private_key())
    untrusted, unsigned, bad_tool, taken = (new_run_id() for _ in range(4))
    jobs = {
        untrusted: {"spec": run_spec(untrusted),
                    "token": sign_submission(stranger, run_id=untrusted, spec=run_spec(untrusted))},
        unsigned: {"spec": run_spec(unsigned)},
        bad_tool: signed_job(run_spec(bad_tool, allowed_tools=["no_such_tool"]), bad_tool),
        taken: signed_job(run_spec(taken), taken),
    }  # fmt: skip
    for run_id, job in jobs.items():
        assert await pool.enqueue_job(START_RUN, job, _job_id=run_id) is not None
    first = await _result(redis, taken)
    assert first["s"] is True, first  # the run exists; now another spec under its id
    await redis.delete(f"arq:result:{taken}")
    other = signed_job(run_spec(taken, input="Something else entirely."), taken)
    assert await pool.enqueue_job(START_RUN, other, _job_id=taken) is not None
    errors = {}
    for run_id in jobs:
        result = await _result(redis, run_id)
        assert result["s"] is False, result
        errors[run_id] = str(result["r"]["error"])  # type: ignore[index]
    return errors


async def test_each_refusal_is_one_warning_with_its_reason_and_no_traceback(
    pool: ArqRedis, redis: aioredis.Redis, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    log_file = tmp_path / "ingress.log"
    with log_file.open("w") as sink:
        ingress = subprocess.Popen(
            [sys.executable, "-m", "callgate.services.ingress"],
            env=subprocess_env,
            stderr=sink,
            stdout=sink,
        )
        try:
            errors = await _refuse_four_ways(pool, redis)
        finally:
            ingress.send_signal(signal.SIGTERM)
            ingress.wait(timeout=20)
    text = log_file.read_text()
    assert sorted(errors.values()) == [
        "AuthError",
        "AuthError",
        "RunSpecError",
        "SpecConflictError",
    ], errors
    assert "Traceback" not in text, text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert not [line for line in lines if line["level"] in ("error", "critical")], text
    assert not [line for line in lines if "exc" in line], text
    refused = [line for line in lines if line["msg"] == "job refused"]
    assert sorted(line["job_id"] for line in refused) == sorted(errors), text
    for line in refused:
        assert line["level"] == "warning" and line["job"] == START_RUN
        assert line["error"] == errors[line["job_id"]]
    reasons = " | ".join(line["reason"] for line in refused)
    for expected in ("stranger", "unsigned", "no_such_tool", "different spec"):
        assert expected in reasons, reasons
