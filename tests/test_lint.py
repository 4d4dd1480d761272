"""The standing checks run with the suite: ruff on everything, mypy --strict on shared/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_clean() -> None:
    result = _run("ruff", "check", "shared", "services", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_shared() -> None:
    result = _run("mypy", "--strict", "shared")
    assert result.returncode == 0, result.stdout + result.stderr
