"""`callgate chaos` end to end, as a user runs it: the whole system as real processes, random
SIGKILLs of every worker kind, a Redis restart, lost booking answers, dropped model streams,
people cancelling runs (one mid-write), resolving unknown outcomes and replying to runs (a
follow-up turn, some sent while the run is busy) — and every invariant at
its required value; the same with Redis under Sentinel and its master SIGKILLed mid-run (writes
waiting for a replica).  Then the crash-point walk: every boundary of every worker, for every
effect kind, crashed once and recovered from."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from callgate.ops.chaos.boundaries import BOUNDARIES, EFFECTS
from callgate.ops.chaos.invariants import CHECKS
from callgate.ops.stack import WORKERS

pytestmark = pytest.mark.slow


def chaos(*args: str, timeout_s: float) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "chaos", "--json", *args],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert done.stdout, done.stderr[-3000:]
    return done.returncode, orjson.loads(done.stdout), done.stderr


@pytest.mark.timeout(300)
def test_a_small_chaos_run_keeps_every_invariant() -> None:
    code, fig, log = chaos("--runs", "24", "--seed", "10", "--kill-every", "1.0", timeout_s=280)
    promised = {"runs", "kills", "lost_runs", "duplicate_writes", "calls_without_one_result",
                "mispaired_results", "recovery_s", "people", "cancelled_calls_executed",
                "cancel_mismatches", "resolve_mismatches", "replies_not_applied_once",
                "replies_to_unfinished_runs", "replied_runs_unsettled"}  # fmt: skip
    assert promised <= set(fig)
    assert fig["runs"]["submitted"] == 24
    assert set(fig["kills"]) == set(WORKERS), fig["kills"]  # every kind was SIGKILLed
    assert fig["redis_restarts"] == 1
    assert fig["model_drops"] > 0
    assert fig["writes"]["reserve_requests"] > 0
    assert min(fig["approvals"].values()) > 0, fig["approvals"]  # approved, denied, expired
    people = fig["people"]
    assert people["cancelled"] > 0 and people["writes_in_flight_at_cancel"] > 0, people
    assert sum(people["resolved"].values()) > 0, people
    assert people["replies"]["sent"] == 4 and people["replies"]["admitted"] > 0, people
    for name in CHECKS:
        assert fig[name] == 0, (name, fig["violations"], log[-2000:])
    assert set(fig["reservations_per_approved_call"]) <= {"0", "1"}
    assert fig["reservations_per_approved_call"].get("1", 0) > 0
    assert fig["recovery_s"]["unrecovered"] == 0
    assert fig["ok"] is True and code == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["--failover", "--cluster"])
def test_a_chaos_run_survives_its_redis_master_dying_under_sentinel_or_in_a_cluster(
    store: str,
) -> None:
    code, fig, log = chaos("--runs", "24", "--seed", "10", store, timeout_s=280)
    assert fig["failovers"] == 1 and fig["durability"] == "replica", fig
    assert 0 < fig["promoted_s"] < 30, fig["promoted_s"]
    assert fig["runs"]["lost"] == 0 and fig["writes"]["reserve_requests"] > 0, fig["runs"]
    # the killed master rejoins as a replica, so no write waits for a replica for good
    assert fig["runs"]["failed"] == 0 and fig["dead_letters"] == 0, (fig["runs"], log[-2000:])
    for name in CHECKS:
        assert fig[name] == 0, (name, fig["violations"], log[-2000:])
    assert fig["ok"] is True and code == 0


@pytest.mark.timeout(300)
def test_every_crash_point_of_every_worker_is_survived_for_every_effect_kind() -> None:
    code, fig, log = chaos("--crash-points", timeout_s=280)
    for boundary in BOUNDARIES:
        for effect in EFFECTS:
            expected = "crashed" if effect in boundary.effects else "-"
            assert fig["boundaries"][boundary.name][effect] == expected, (boundary.name, effect)
    assert sum(fig["restarts"].values()) >= fig["crashes"] > len(BOUNDARIES)
    assert fig["runs"]["completed"] == fig["runs"]["submitted"] == 3 * len(EFFECTS)
    for name in CHECKS:
        assert fig[name] == 0, (name, fig["violations"], log[-2000:])
    assert fig["ok"] is True and code == 0
