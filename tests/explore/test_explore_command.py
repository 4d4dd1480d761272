"""`callgate explore` as a user runs it: the CI budget on main finds no violation, and a replay
file is read back (or refused with one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

CI_BUDGET_S = 90
"""What CI explores on every change (README: How exactly-once is tested)."""


def callgate(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", *args],
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(CI_BUDGET_S + 120)
def test_main_holds_every_invariant_over_the_ci_budget(tmp_path: Path) -> None:
    done = callgate(
        "explore",
        "--seconds",
        str(CI_BUDGET_S),
        "--seed",
        "1",
        "--json",
        "--out",
        str(tmp_path / "failure.json"),
        timeout=CI_BUDGET_S + 90,
    )
    fig = orjson.loads(done.stdout)
    assert done.returncode == 0, fig["found"]
    assert fig["violations"] == 0 and fig["found"] is None
    assert fig["events"] > 5_000 and fig["episodes"] > 50
    assert fig["triples"] > 150
    assert not (tmp_path / "failure.json").exists()
    print(
        f"explore: {fig['events']} events, {fig['events_per_s']} events/s, "
        f"{fig['triples']} of {fig['possible_triples']} triples"
    )


def test_a_schedule_that_no_longer_breaks_replays_clean(tmp_path: Path) -> None:
    path = tmp_path / "case.json"
    path.write_bytes(
        orjson.dumps(
            {
                "version": 1,
                "seed": 7,
                "invariant": "duplicate_writes",
                "choices": [
                    "e:start run x1",
                    "e:deliver TurnRequest (x1 turn 1) to model_turn",
                    "a:writes_one_resource",
                ],
            }
        )
    )
    done = callgate("explore", "--replay", str(path), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "  1. start run x1"  # progress, not injected
    assert "no longer broken: duplicate_writes holds" in done.stdout


def test_a_file_that_is_not_a_replay_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text("[1, 2]")
    done = callgate("explore", "--replay", str(path), timeout=30)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not a replay file" in done.stderr
    assert "Traceback" not in done.stderr
