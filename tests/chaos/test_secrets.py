"""Planted secrets never leak: the provider API key every worker holds appears nowhere in
Redis, and a tool argument marked sensitive (hold_seat's contact_email) appears in no event
log, stream, trace or worker log — only in the records that must hold it to run the call,
resend the conversation and answer the user (the call record, the history, the raw response,
and the run record's final text, since the model's answer repeats it)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import redis.asyncio as aioredis

from callgate.logs import JsonFormatter
from tests.chaos.conftest import PLANTED_API_KEY, Deployment

PLANTED_EMAIL = "planted-7f3a9c51@secret.example"
"""The contact_email the chaos-secret scenario sends
(shared/standins/scenarios/chaos-secret.json)."""
HOLDS = ["callgate.standins.demo.holds"]
MAY_HOLD_THE_ARGUMENT = (":call:", ":hist:", ":raw:", ":run:")


async def everything_stored(redis: aioredis.Redis, pattern: str) -> dict[str, bytes]:
    """Every key matching ``pattern`` and its whole value, whatever its type, as bytes."""
    found: dict[str, bytes] = {}
    async for raw_key in redis.scan_iter(match=pattern, count=1000):
        key = raw_key.decode()
        kind = (await redis.type(key)).decode()
        if kind == "string":
            value: object = await redis.get(key)
        elif kind == "hash":
            value = await redis.hgetall(key)
        elif kind == "list":
            value = await redis.lrange(key, 0, -1)
        elif kind == "set":
            value = await redis.smembers(key)
        elif kind == "zset":
            value = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = await redis.xrange(key)
        else:
            value = kind
        found[key] = repr(value).encode()
    return found


@pytest.mark.parametrize("answer_lost", [False, True], ids=["executed", "reconciled"])
async def test_planted_secrets_reach_no_log_no_trace_no_event(
    fresh: Deployment, answer_lost: bool
) -> None:
    if answer_lost:  # the write's answer is lost: the reconciler settles it instead
        fault = {"mode": "commit_then_drop", "count": 1}
        await fresh.http("booking", "POST", "/_faults", {"reserve": fault})
    run_id = await fresh.submit("chaos-secret", HOLDS)
    view = await fresh.settle(run_id)
    assert view["status"] == "completed"
    call = await fresh.call(run_id, "t1.0")
    assert (call.reason or "").startswith("reconciled") == answer_lost
    # The secret really travelled: the tool got it and echoed it in its result.
    assert call.arguments is not None and call.arguments["contact_email"] == PLANTED_EMAIL
    assert call.result is not None
    assert call.result.model_dump()["payload"]["contact_email"] == PLANTED_EMAIL
    assert PLANTED_EMAIL in view["final_text"]  # and the model repeated it in its answer

    redis = aioredis.Redis.from_url(fresh.settings.redis_url)
    try:
        stored = await everything_stored(redis, f"{fresh.settings.key_prefix}*")
        stored |= await everything_stored(redis, "arq:*")
    finally:
        await redis.aclose()
    assert any(run_id in key for key in stored)
    assert [k for k, v in stored.items() if PLANTED_API_KEY.encode() in v] == []
    holding = [k for k, v in stored.items() if PLANTED_EMAIL.encode() in v]
    assert holding and all(any(p in k for p in MAY_HOLD_THE_ARGUMENT) for k in holding), holding

    env = {**os.environ, "REDIS_URL": fresh.settings.redis_url,
           "CALLGATE_KEY_PREFIX": fresh.settings.key_prefix}  # fmt: skip
    trace = subprocess.run([sys.executable, "-m", "callgate.ops.cli", "trace", run_id], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert trace.returncode == 0 and "hold_seat" in trace.stdout
    assert PLANTED_EMAIL not in trace.stdout and PLANTED_API_KEY not in trace.stdout

    logs = fresh.worker_logs()
    assert any(run_id in line for line in logs)
    assert [line for line in logs if PLANTED_EMAIL in line or PLANTED_API_KEY in line] == []


def test_a_log_line_that_would_carry_a_key_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop for what no call site should log: an SDK error echoing the key, a field
    named like a credential, a traceback — the formatter masks them all."""
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_API_KEY)
    formatter = JsonFormatter("model_turn")
    try:
        raise RuntimeError(f"401 Incorrect API key provided: {PLANTED_API_KEY}")
    except RuntimeError:
        record = logging.LogRecord(
            "callgate.test", logging.ERROR, __file__, 1, "request failed: %s",
            (f"key={PLANTED_API_KEY}",), sys.exc_info(),
        )  # fmt: skip
    record.fields = {"api_key": "sk-other-0123456789abcdef", "contact": PLANTED_EMAIL}
    line = formatter.format(record)
    assert PLANTED_API_KEY not in line and "sk-other" not in line
    assert "request failed" in line and "401 Incorrect API key" in line
