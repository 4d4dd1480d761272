"""A message or record of a newer ledger schema than the workers read, met mid-run (as during a
rolling upgrade, or planted by anyone with Redis write access): it is refused — dead-lettered
with a reason that says what to do — and nothing is failed, decided or run on it.

* carol's genuine approval, re-encoded as schema 2, is dead-lettered; the run still waits, and
  the same approval as schema 1 then applies.
* the run record marked schema 2 (what a newer worker would write) makes the validator refuse
  carol's genuine schema-1 approval: dead-lettered with the record's reason, the run neither
  failed nor moved, the call not approved; once the record reads again (as after the workers'
  upgrade), `callgate requeue` puts the approval back and the run completes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.envelopes import encode
from callgate.records import LEDGER_SCHEMA
from callgate.states import RUN_TERMINAL
from tests.chaos.conftest import Deployment
from tests.chaos.test_hostile_approvals import pending, signed

pytestmark = pytest.mark.slow

NEWER = LEDGER_SCHEMA + 1


async def dead_letter_for(deployment: Deployment, message_id: str) -> tuple[str, str]:
    """(entry id, reason) of the message ``message_id``'s dead letter, once it is written."""
    redis = aioredis.Redis.from_url(deployment.settings.redis_url)
    try:
        for _ in range(600):
            for entry, fields in await redis.xrevrange(deployment.keys.dead_letter(0), count=50):
                if message_id_of(fields.get(b"d", b"")) == message_id:
                    return entry.decode(), fields[b"reason"].decode()
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    raise AssertionError(f"message {message_id} was not dead-lettered")


def message_id_of(raw: bytes) -> object:
    """The ``msg_id`` a dead message carries, if it is a JSON object at all (other tests of this
    deployment dead-letter forged bytes)."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return message.get("msg_id") if isinstance(message, dict) else None


async def moved_on(deployment: Deployment, run_id: str) -> str:
    """The state the run ends in, once it has left ``paused_approval``."""
    for _ in range(600):
        view = await deployment.settle(run_id)
        if view["status"] in RUN_TERMINAL:
            return str(view["status"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end: {view['status']}")


async def record_fields(deployment: Deployment, key: str, *names: str) -> list[str | None]:
    redis = aioredis.Redis.from_url(deployment.settings.redis_url, decode_responses=True)
    try:
        return list(await redis.hmget(key, list(names)))
    finally:
        await redis.aclose()


async def test_a_newer_message_is_refused_and_fails_nothing(fresh: Deployment) -> None:
    waiting = await pending(fresh, {"user": "alice"})
    genuine = waiting.decision(signed(waiting, "carol"))
    newer = orjson.loads(encode(genuine))
    newer["v"] = NEWER

    await fresh.post_raw("decisions", waiting.run_id, orjson.dumps(newer))

    _, reason = await dead_letter_for(fresh, genuine.msg_id)
    assert reason == (
        f"this decision is of ledger schema {NEWER}, newer than this worker reads (up to "
        f"{LEDGER_SCHEMA}): upgrade this worker; nothing was failed"
    )
    view = await fresh.settle(waiting.run_id)
    assert view["status"] == "paused_approval"
    assert [c["state"] for c in view["calls"]] == ["needs_approval"]
    await fresh.post("decisions", waiting.decision(signed(waiting, "carol")))
    assert await moved_on(fresh, waiting.run_id) == "completed"


async def test_a_newer_run_record_is_refused_and_the_run_is_not_failed(fresh: Deployment) -> None:
    waiting = await pending(fresh, {"user": "alice"})
    run_key = fresh.keys.run(waiting.run_id)
    redis = aioredis.Redis.from_url(fresh.settings.redis_url)
    try:
        await redis.hset(run_key, "v", NEWER)
    finally:
        await redis.aclose()
    approval = waiting.decision(signed(waiting, "carol"))

    await fresh.post("decisions", approval)

    dead, reason = await dead_letter_for(fresh, approval.msg_id)
    assert reason.startswith(f"RunRecord is of ledger schema {NEWER}, newer than this worker")
    assert await record_fields(fresh, run_key, "status") == ["paused_approval"]
    call = fresh.keys.call(waiting.run_id, waiting.call_id)
    assert await record_fields(fresh, call, "state") == ["needs_approval"]

    # The workers now read the record (as once upgraded): the operator puts the approval back.
    redis = aioredis.Redis.from_url(fresh.settings.redis_url)
    try:
        await redis.hset(run_key, "v", LEDGER_SCHEMA)
    finally:
        await redis.aclose()
    requeued = subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "requeue", dead],
        env={**fresh.system.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert requeued.returncode == 0 and requeued.stdout == f"requeued {dead}\n", requeued.stderr
    assert await moved_on(fresh, waiting.run_id) == "completed"
