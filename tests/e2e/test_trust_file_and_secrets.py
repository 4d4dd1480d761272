"""Attacks 6 and 8 of issue #31, against a whole deployment of real worker processes.

6. The trust file is edited live (README says so): truncated or half-written for a moment by an
   editor's save, it used to make every decision dead-letter — the approval stayed pending,
   nothing entered the trace, and an approved call reaching the executor then was reported
   "not applied".  Now the last version that loaded keeps serving: carol's signed approval
   applies, the write happens once, the bad version is logged once with its reason, and
   `callgate doctor` names the bad file until it is fixed.
8. A secret inside a longer string — a tool argument, the model's text — used to reach the
   event log and the trace unchanged; each is now replaced where it stands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec
from tests.e2e.people import http, status, submit, until

pytestmark = pytest.mark.slow

KEY = "sk-planted0embedded0key0123456789"
TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
LEAKY = {
    "description": "Secrets embedded in a tool argument and in the model's text.",
    "steps": [
        {"name": "ask", "when": {"assistant_turns": 0},
         "text": f"Checking the weather; I will use key {KEY} now.",
         "tool_calls": [{"name": "get_weather",
                         "arguments": {"city": f"Hangzhou (use key {KEY} now)",
                                       "date": "2026-12-20"}}]},
        {"name": "answer", "when": {"results_for": ["get_weather"]},
         "text": f"Done. Send Authorization: Bearer {TOKEN} with key={KEY}, thanks."},
    ],
}  # fmt: skip
BAD_VERSIONS = {"truncated": "", "half-written": '{"submitters": {"local": {"public_key": "ed'}


@pytest.fixture(scope="module")
def trust_file(tmp_path_factory: pytest.TempPathFactory, callgate_home: Path) -> Path:
    """A copy of the session's trust file that only this module's deployment reads."""
    path = tmp_path_factory.mktemp("trust") / "trust.json"
    shutil.copyfile(callgate_home / "trust.json", path)
    return path


@pytest.fixture(scope="module")
def system(
    redis_server: EmbeddedRedis, trust_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalSystem]:
    scenarios = tmp_path_factory.mktemp("scenarios")
    (scenarios / "leaky-secrets.json").write_text(json.dumps(LEAKY))
    spec = SystemSpec(services=("travel", "booking"), scripted_model=True,
                      redis_url=redis_server.url, scenarios=(scenarios,),
                      env={"CALLGATE_TRUST_FILE": str(trust_file)}, grace_s=3.0)  # fmt: skip
    with LocalSystem(spec) as running:
        yield running


def cli(system: LocalSystem, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "callgate.ops.cli", *argv], env=system.env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def refusals_logged(system: LocalSystem, worker: str) -> list[str]:
    return [line for line in system.supervisor.tail(worker) if "trust file does not load" in line]


@pytest.mark.parametrize("bad", list(BAD_VERSIONS))
async def test_a_trust_file_mid_edit_keeps_the_last_version_serving(
    system: LocalSystem, trust_file: Path, bad: str
) -> None:
    good = trust_file.read_text()
    logged_before = len(refusals_logged(system, "validator"))
    await http(system, "booking", "POST", "/_reset")
    async with CallgateClient(system.settings) as client:
        run_id = await submit(
            client,
            "openai-chat",
            "workshop-reserve",
            ["check_seats", "check_eligibility", "reserve_seat"],
        )
        await until(client, run_id, status("paused_approval"))
        call = await client.ledger.get_call(run_id, "t1.0")
        assert call is not None and call.approval_id is not None
        try:
            trust_file.write_text(BAD_VERSIONS[bad])  # the editor's save, half done
            doctor = cli(system, "doctor", "--no-redis")
            assert doctor.returncode == 1 and f"trust file {trust_file}" in doctor.stderr
            approved = cli(system, "approve", call.approval_id, "--as", "carol")
            assert approved.returncode == 0, approved.stdout + approved.stderr
            view = await until(client, run_id, status("completed"))
        finally:
            trust_file.write_text(good)  # the save completes
        stats = await http(system, "booking", "GET", "/_stats")
        assert stats["reserve"]["requests"] == 1, "the approved write was sent once"
        assert view["calls"][0]["state"] == "succeeded"
        types = [e.type for e in await client.events(run_id)]
        assert "approval.refused" not in types and "approval.approved" in types, types
        approval = await client.ledger.get_approval(run_id, call.approval_id)
        assert approval is not None and approval.state != "pending"
    # Loudly, once for this bad version, with the reason; `doctor` is happy again.
    assert len(refusals_logged(system, "validator")) == logged_before + 1
    assert cli(system, "doctor", "--no-redis").returncode == 0


async def test_embedded_secrets_never_reach_events_or_the_trace(system: LocalSystem) -> None:
    async with CallgateClient(system.settings) as client:
        run_id = await submit(client, "openai-chat", "leaky-secrets", ["get_weather"])
        view = await until(client, run_id, status("completed", "failed"))
        events = await client.events(run_id)
    assert KEY in view["final_text"]  # the answer itself is the user's to keep
    dumped = json.dumps([e.data for e in events])
    assert KEY not in dumped and TOKEN not in dumped
    assert "use key [redacted] now" in dumped  # the rest of the text stays readable
    for flags in ((), ("--json",), ("--full",)):
        shown = cli(system, "trace", run_id, *flags)
        assert shown.returncode == 0, shown.stderr
        assert KEY not in shown.stdout and TOKEN not in shown.stdout
        assert "[redacted]" in shown.stdout
