"""`callgate compile`: the step builders built with mypyc into a copy of the package, and the
ledger's own tests passing on that copy, through a real Redis — the compiled modules build,
guard and encode steps as their sources do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.compiled import COMPILED, ORIGIN, sources_digest
from callgate.ops.compile_cli import MARKER, copy_package

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 1800
"""A guard against a hang, not a speed limit: about two minutes on a quiet 2-core VM (mypy checks
the package first), several times that on a slow one."""
LEDGER_TESTS = (
    "tests/unit/test_records.py",
    "tests/unit/test_states.py",
    "tests/unit/test_redact.py",
    "tests/integration/test_store.py",
    "tests/integration/test_group_commit.py",
    "tests/integration/test_event_log_type.py",
    "tests/integration/test_validator_carried_facts.py",
    "tests/integration/test_executor_reads.py",
)
"""Steps through the ledger's script on a real Redis (guards, all-or-nothing, group commit,
carried facts), and the codecs and redaction the compiled modules hold."""


def _compile(target: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "callgate.ops.cli", "compile", "--target", str(target)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def _on(target: Path, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
def test_the_compiled_step_builders_pass_the_ledgers_tests(tmp_path: Path) -> None:
    target = tmp_path / "compiled"
    built = _compile(target)
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.strip() == f"PYTHONPATH={target}"

    which = "from callgate.compiled import compiled_modules; print(compiled_modules())"
    found = _on(target, [sys.executable, "-c", which], 60)
    assert found.stdout.strip() == str(list(COMPILED)), found.stderr

    tests = _on(
        target, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *LEDGER_TESTS], 600
    )
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout


def test_a_directory_holding_something_else_is_refused_untouched(tmp_path: Path) -> None:
    kept = tmp_path / "notes.txt"
    kept.write_text("mine")
    done = _compile(tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"callgate: {tmp_path} is not empty: give a new directory, or one callgate compile made"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert not (tmp_path / MARKER).exists()


def _built_from(target: Path, sources: Path) -> None:
    """Record in the copy that it was built from ``sources`` as they are now."""
    origin = {"dirs": [str(sources)], "digest": sources_digest([sources])}
    (target / "callgate" / ORIGIN).write_text(json.dumps(origin))


def _stale_copy(tmp_path: Path) -> Path:
    """A copy laid out as `callgate compile` makes it (compiling changes nothing here), current
    until its sources take the next release."""
    target, sources = tmp_path / "compiled", tmp_path / "sources"
    copy_package(target)
    shutil.copytree(ROOT / "shared", sources)
    _built_from(target, sources)
    check = "from callgate.compiled import check_build; check_build(); print('current')"
    assert _on(target, [sys.executable, "-c", check], 60).stdout.strip() == "current"
    with (sources / "ledger" / "tx.py").open("a") as upgraded:
        upgraded.write("# the next release\n")
    return target


def test_a_worker_refuses_a_compiled_copy_whose_sources_changed_since(tmp_path: Path) -> None:
    """An upgrade without compiling again would run the old release from the copy: every
    worker stops at start-up and says what to do (exit 2), instead."""
    target = _stale_copy(tmp_path)
    worker = _on(target, [sys.executable, "-m", "callgate.services.executor"], 60)
    assert worker.returncode == 2
    assert "changed since it was built: take it off PYTHONPATH" in worker.stdout + worker.stderr


def test_a_command_refuses_a_stale_copy_and_compile_refuses_any_copy(tmp_path: Path) -> None:
    """A command would run the old release's steps (`callgate cancel` writes one): one line,
    exit 2, nothing done.  `compile` copies the package it runs, so it refuses to run from a
    copy, current or not, rather than copy the copy."""
    target = _stale_copy(tmp_path)
    cli = [sys.executable, "-m", "callgate.ops.cli"]
    cancel = _on(target, [*cli, "cancel", "no-such-run", "--as", "alice"], 60)
    assert cancel.returncode == 2, cancel.stderr
    [line] = cancel.stderr.strip().splitlines()
    assert line.startswith("callgate: PYTHONPATH runs the compiled copy in ")
    assert line.endswith(f"callgate compile --target {target} (with it off PYTHONPATH)")

    _built_from(target, ROOT / "shared")  # current again: this checkout's sources
    again = _on(target, [*cli, "compile", "--target", str(tmp_path / "other")], 60)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"callgate: this callgate runs the compiled copy in {target}: take it off PYTHONPATH "
        "to compile"
    ]
    assert not (tmp_path / "other").exists()
