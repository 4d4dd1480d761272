"""The standing checks run with the suite: ruff (lint and format) on everything, mypy --strict on
the package and on the examples (each a package under ``examples/``, imported with that folder on
the path).

The package is installed as ``callgate`` from two folders (``shared/`` and ``services/``), which
mypy cannot follow through the editable install's import hook; so mypy reads it through a
tree of links laid out as the installed package is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def installed_layout(into: Path) -> Path:
    """``into/callgate``: links to ``shared/``'s entries, and ``services`` to ``services/``."""
    package = into / "callgate"
    package.mkdir()
    for entry in (ROOT / "shared").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "services").symlink_to(ROOT / "services")
    return package


def test_ruff_clean() -> None:
    result = _run("ruff", "check", "shared", "services", "tests", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_clean() -> None:
    result = _run("ruff", "format", "--check", "shared", "services", "tests", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def example_packages(into: Path) -> list[str]:
    """Link every package of ``examples/`` into ``into``; their names."""
    names = []
    for entry in sorted((ROOT / "examples").iterdir()):
        if (entry / "__init__.py").is_file():
            (into / entry.name).symlink_to(entry)
            names.append(entry.name)
    return names


def test_mypy_strict_whole_package(tmp_path: Path) -> None:
    installed_layout(tmp_path)
    packages = [arg for name in example_packages(tmp_path) for arg in ("-p", name)]
    config = str(ROOT / "pyproject.toml")
    result = _run(
        "mypy", "--config-file", config, "--strict", "-p", "callgate", *packages, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
