"""callgate installs under its own name: ``callgate`` and ``callgate.services``, never ``shared``
or ``services``, and a user's own ``shared`` package cannot shadow it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _package_dirs() -> set[str]:
    """Every folder with an ``__init__.py`` under shared/ and services/, by its import name."""
    names = set()
    for top, name in (("shared", "callgate"), ("services", "callgate.services")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            names.add(".".join([name, *rel.parts]))
    return names


def test_every_package_folder_is_installed_and_nothing_else() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _package_dirs()
    assert config["package-dir"] == {"callgate": "shared", "callgate.services": "services"}


def test_every_data_file_ships_as_package_data() -> None:
    """The console's templates and static files, the Lua scripts and the scenarios are in an
    installed package too, not only in a checkout."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["callgate"]
    shared = ROOT / "shared"
    data = [
        path.relative_to(shared)
        for path in shared.rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts
    ]
    assert data, "shared/ holds data files"
    assert [str(p) for p in data if not any(p.match(glob) for glob in globs)] == []


def test_the_public_api_imports_from_any_directory(tmp_path: Path) -> None:
    code = (
        "import callgate\n"
        "from callgate import (CallgateClient, Effect, Identity, Reconciliation, RunSpec,\n"
        "                      Settings, Tool, ToolContext, ToolError)\n"
        "print(callgate.__file__)"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == ROOT / "shared" / "__init__.py"


def test_shared_and_services_are_not_importable_even_from_the_repository() -> None:
    for name in ("shared", "services"):
        result = _python(f"import {name}", ROOT)
        assert result.returncode != 0
        assert "ImportError" in result.stderr or "ModuleNotFoundError" in result.stderr


def test_a_users_own_shared_package_does_not_shadow_callgate(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "shared" / "client.py").write_text("WHOSE = 'the user'\n")
    code = (
        "import shared, shared.client\n"
        "from callgate import CallgateClient\n"
        "from callgate.client import CallgateClient as Same\n"
        "assert shared.MINE and shared.client.WHOSE == 'the user' and CallgateClient is Same\n"
        "print('ok')"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_workers_start_under_the_callgate_name(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "callgate.services.executor", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "python -m callgate.services.executor" in result.stdout
