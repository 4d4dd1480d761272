"""`callgate cases`, end to end: a workshop run on each protocol is exported with the CLI and
replayed through a fresh deployment by the CLI.

* Each case replays the same: the same calls decided the same way, results paired by call id,
  the read answered from the recording, the write taken by the recording stub — and the booking
  service the recorded run used (still up, and the replay's tools pointed at it) receives no
  request from any replay.
* The same case with the recorded reservation's ``event_id`` edited to an invalid value replays
  differently, and the difference names the call and its changed decision.
* The upgrade drill: cases recorded under the lowest supported SDKs (``tests/e2e/cases``, made
  with `constraints/lowest.txt`) replay the same through the SDKs installed now.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import pytest
from packaging.version import Version

from callgate.client import CallgateClient
from callgate.ops.conformance.drive import approve
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.e2e.people import APIS, connected, deployment, http, until

pytestmark = pytest.mark.slow

SCENARIOS = Path(__file__).parent / "scenarios"
RECORDED = Path(__file__).parent / "cases"
"""The lab run on each protocol, recorded under openai 3.38.0 and anthropic 2.5.0."""
WORKSHOP = "callgate.standins.demo.workshop"


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    yield from deployment(redis_server, ("booking",), scenarios=(SCENARIOS,))


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking",)) as c:
        yield c


def cli(system: LocalSystem, *args: str) -> subprocess.CompletedProcess[str]:
    """``callgate ARGS`` as an operator of ``system`` runs it (its settings, its workshop)."""
    env = {**system.env, "CALLGATE_TOOL_MODULES": WORKSHOP}
    return subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


async def recorded_run(client: CallgateClient, api: str) -> str:
    """alice's lab run on ``api``: carol approves the reservation; it completes."""
    run_id = await client.submit(
        {
            "api": api,
            "model": "cases-lab",
            "input": "Is there room in the open lab? Book me in.",
            "identity": {"user": "alice"},
            "allowed_tools": ["check_seats", "reserve_seat"],
        }
    )
    await until(client, run_id, lambda v: v["status"] == "paused_approval")
    assert await approve(client, run_id) == 1
    view = await until(client, run_id, lambda v: v["status"] == "completed")
    assert [c["state"] for c in view["calls"]] == ["succeeded", "succeeded"]
    return run_id


def replay(system: LocalSystem, path: Path) -> tuple[int, dict[str, Any]]:
    done = cli(system, "cases", "run", str(path), "--json")
    assert done.stdout, done.stderr
    return done.returncode, orjson.loads(done.stdout)


async def test_each_protocol_replays_the_same_and_no_write_leaves(
    system: LocalSystem, client: CallgateClient, tmp_path: Path
) -> None:
    for api in APIS:
        run_id = await recorded_run(client, api)
        exported = cli(system, "cases", "export", run_id, "--out", str(tmp_path), "--name", api)
        assert exported.returncode == 0, exported.stderr
    reserved = await http(system, "booking", "GET", "/_stats")
    assert reserved["reserve"]["created"] == len(APIS)

    code, verdicts = replay(system, tmp_path)

    assert code == 0, verdicts
    cases = verdicts["cases"]
    assert sorted(c["name"] for c in cases) == sorted(APIS)
    for case in cases:
        assert case["passed"] and case["api"] == case["name"], case
        assert case["writes_to_stub"] == 1, case
        stats = await http(system, "booking", "GET", f"/_stats/runs/{case['run_id']}")
        assert stats.get("requests", {}) == {} and stats.get("created", 0) == 0, stats
    assert await http(system, "booking", "GET", "/_stats") == reserved


async def test_an_edited_argument_is_a_changed_decision_named_by_call(
    system: LocalSystem, client: CallgateClient, tmp_path: Path
) -> None:
    run_id = await recorded_run(client, "openai-responses")
    assert cli(system, "cases", "export", run_id, "--out", str(tmp_path)).returncode == 0
    path = tmp_path / f"{run_id}.json"
    case = orjson.loads(path.read_bytes())
    reserve = next(
        i for i in case["turns"][0]["response"]["output"] if i.get("name") == "reserve_seat"
    )
    arguments = orjson.loads(reserve["arguments"])
    arguments["event_id"] = "the-big-one"
    reserve["arguments"] = orjson.dumps(arguments).decode()
    path.write_bytes(orjson.dumps(case))

    code, verdicts = replay(system, path)

    assert code == 1
    (verdict,) = verdicts["cases"]
    assert not verdict["passed"] and verdict["writes_to_stub"] == 0
    assert (
        f"call 2 (reserve_seat) [{reserve['call_id']}]: the decision changed: needs_approval, "
        "now rejected (invalid_arguments)"
    ) in verdict["differences"], verdict["differences"]


def test_cases_recorded_under_older_sdks_replay_the_same_through_the_installed_ones(
    system: LocalSystem,
) -> None:
    recorded = {path.stem: orjson.loads(path.read_bytes()) for path in RECORDED.glob("*.json")}
    assert len(recorded) == len(APIS)

    code, verdicts = replay(system, RECORDED)

    assert code == 0, verdicts
    for verdict in verdicts["cases"]:
        assert verdict["passed"] and verdict["writes_to_stub"] == 1, verdict
        turn = recorded[verdict["name"]]["turns"][0]
        older, installed = Version(turn["sdk_version"]), Version(version(turn["provider"]))
        assert older < installed, (verdict["name"], older, installed)
