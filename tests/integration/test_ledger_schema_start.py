"""Old and new workers side by side: a worker started under a deployment whose ledger a newer
callgate already writes refuses to start, in one line, exit 2 — rather than meet the newer
records one message at a time.  A worker of the deployment's own schema starts and records it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.keys import Keys
from callgate.records import LEDGER_SCHEMA

START_FAILED = 2


def start(env: dict[str, str], service: str) -> subprocess.CompletedProcess[str]:
    """``service`` started with ``--burst``: it drains its (empty) work and exits, if it starts."""
    return subprocess.run(
        [sys.executable, "-m", f"callgate.services.{service}", "--burst"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("service", ["validator", "ingress"])
async def test_a_worker_older_than_the_ledger_refuses_to_start(
    service: str, settings: Settings, redis: aioredis.Redis, subprocess_env: dict[str, str]
) -> None:
    key = Keys(settings.key_prefix).ledger_schema()
    await redis.set(key, LEDGER_SCHEMA + 1)

    done = start(subprocess_env, service)

    assert done.returncode == START_FAILED, done.stderr
    assert (
        f"this deployment's ledger is of ledger schema {LEDGER_SCHEMA + 1}, newer than this "
        f"worker reads (up to {LEDGER_SCHEMA}): upgrade this worker; it did not start"
    ) in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_worker_records_its_schema_as_the_deployments(
    settings: Settings, redis: aioredis.Redis, subprocess_env: dict[str, str]
) -> None:
    done = start(subprocess_env, "validator")

    assert done.returncode == 0, done.stderr
    assert await redis.get(Keys(settings.key_prefix).ledger_schema()) == str(LEDGER_SCHEMA).encode()
