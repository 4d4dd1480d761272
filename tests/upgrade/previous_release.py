"""The previous release, found by the repository's own history and installed in a venv of its own.

Which release: the newest ``## X.Y.Z — date (commit HASH)`` section of CHANGELOG.md whose version
is not pyproject's; its tree is the tag ``vX.Y.Z`` when git knows it, else the commit written
there (a CI clone of main may carry no tags).  No git, or neither known: `PreviousReleaseError`,
which the fixture turns into a failure, never a skip — an upgrade nobody tested is the risk.

How: ``git archive`` of that tree into a temporary folder, a venv made with ``--without-pip``,
and the tree's packages copied into it as its pyproject maps them (``[tool.setuptools]
package-dir``: ``shared/`` is ``callgate``, ``services/`` is ``callgate.services``), with a
dist-info naming the old version.  No build backend runs: ``pip install --no-build-isolation``
needs ``wheel`` beside setuptools < 70.1 (this venv has none; a 3.12 venv has no setuptools
at all), and with isolation pip fetches setuptools from a registry for some 12 s.  The old code
runs on this venv's third-party packages (a ``.pth`` line), so the install takes about two
seconds, offline; the old release's own requirements are checked against them first, and a
moved bound that excludes them fails with the requirement named.
"""

from __future__ import annotations

import compileall
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from callgate.ops.stack import OPTIONAL_WORKERS, WORKERS

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## (\d+\.\d+\.\d+) — \S+ \(commit ([0-9a-f]{7,40})\)\s*$", re.MULTILINE)
GIT_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 60.0
_WHERE = """\
import importlib.util, inspect, sys
import callgate
print(inspect.getfile(callgate))
print(",".join(k for k in sys.argv[1:] if importlib.util.find_spec(f"callgate.services.{k}")))
"""
"""Run by the old venv's python: where its callgate is, and which worker kinds it has."""


class PreviousReleaseError(RuntimeError):
    """The previous release cannot be found or installed; the message says why."""


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    """The commit its CHANGELOG section names."""
    rev: str
    """What its tree is taken from: the tag if git knows it, else ``commit``."""


@dataclass(frozen=True)
class Installed:
    """A release installed in its own venv."""

    release: Release
    python: Path
    package: Path
    """Its ``callgate`` package folder, inside the venv."""
    kinds: tuple[str, ...]
    """The worker kinds it has (of the ones this release knows)."""

    def check_imports(self, env: Mapping[str, str], cwd: Path) -> None:
        """Its python, run as a worker is (``env``, ``cwd``), imports its own callgate."""
        where = _probe(self.python, _WHERE, env=env, cwd=cwd)[0]
        if not Path(where).resolve().is_relative_to(self.package.resolve()):
            raise PreviousReleaseError(
                f"{self.python} imports callgate from {where}, not from {self.package}"
            )


def _pyproject(root: Path) -> dict[str, Any]:
    return tomllib.loads((root / "pyproject.toml").read_text())


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreviousReleaseError(f"git {args[0]} could not run in {root}: {exc}") from exc


def _unknown(root: Path, rev: str) -> str | None:
    """None if git knows commit ``rev``, else what git said (empty: just not there)."""
    found = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return None if found.returncode == 0 else found.stderr.decode().strip()


def previous_release(root: Path = ROOT) -> Release:
    """The release to upgrade from (see the module docstring)."""
    current = str(_pyproject(root)["project"]["version"])
    sections = HEADING.findall((root / "CHANGELOG.md").read_text())
    older = [(v, c) for v, c in sections if v != current]
    if not older:
        raise PreviousReleaseError(
            f"CHANGELOG.md has no '## X.Y.Z — date (commit HASH)' section other than {current}"
        )
    version, commit = max(older, key=lambda vc: _version_key(vc[0]))
    said: dict[str, None] = {}
    for rev in (f"v{version}", commit):
        unknown = _unknown(root, rev)
        if unknown is None:
            return Release(version, commit, rev)
        said.update(dict.fromkeys([unknown] if unknown else []))
    raise PreviousReleaseError(
        f"git in {root} knows neither the tag v{version} nor commit {commit} (CHANGELOG.md's "
        f"{version}): clone with history (fetch-depth 0) so the upgrade test can install it"
        + "".join(f"; git: {line}" for line in said)
    )


def _extract(root: Path, rev: str, into: Path) -> None:
    archive = into.with_suffix(".tar")
    result = _git(root, "archive", "--format=tar", f"--output={archive}", rev)
    if result.returncode != 0:
        raise PreviousReleaseError(f"git archive {rev} failed: {result.stderr.decode().strip()}")
    into.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()


def check_requirements(tree: Path) -> None:
    """The old release's own requirements hold for the third-party packages it will share."""
    unmet = []
    for line in _pyproject(tree)["project"]["dependencies"]:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is None or not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{line} (this venv: {have or 'not installed'})")
    if unmet:
        raise PreviousReleaseError(
            "the previous release cannot run on this venv's packages: " + "; ".join(unmet)
        )


def _copy_packages(tree: Path, site: Path) -> Path:
    """Copy the tree's packages into ``site`` as its pyproject's package-dir maps them."""
    setuptools: dict[str, Any] = _pyproject(tree).get("tool", {}).get("setuptools", {})
    mapping: dict[str, str] = setuptools.get("package-dir", {})
    if not mapping:
        raise PreviousReleaseError(
            f"{tree}/pyproject.toml maps no [tool.setuptools] package-dir: teach "
            "tests/upgrade/previous_release.py how that release lays out its packages"
        )
    for name in sorted(mapping, key=lambda n: n.count(".")):
        target = site.joinpath(*name.split("."))
        shutil.copytree(tree / mapping[name], target, dirs_exist_ok=True)
    top = min(mapping, key=lambda n: n.count("."))
    compileall.compile_dir(site / top, quiet=1, workers=0)
    return site / top


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("tests/upgrade\n")


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _probe(
    python: Path, code: str, *args: str, env: Mapping[str, str] | None = None, cwd: Path = Path("/")
) -> list[str]:
    """The lines ``python -c code args`` prints (by default outside this tree, with this
    environment but no PYTHONPATH)."""
    env = _plain_env() if env is None else env
    argv = [str(python), "-c", code, *args]
    result = subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=PROBE_TIMEOUT_S
    )
    if result.returncode != 0:
        failed = f"exited with {result.returncode}: {result.stderr.strip()}"
        raise PreviousReleaseError(f"{python} {failed}")
    return result.stdout.splitlines()


def install(release: Release, into: Path, root: Path = ROOT) -> Installed:
    """Install ``release`` into a venv under ``into``; check it imports its own callgate."""
    tree = into / f"callgate-{release.version}"
    _extract(root, release.rev, tree)
    check_requirements(tree)
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(_probe(python, "import sysconfig; print(sysconfig.get_path('purelib'))")[0])
    shared = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "_callgate_upgrade_shared.pth").write_text("".join(f"{p}\n" for p in sorted(shared)))
    package = _copy_packages(tree, site)
    _dist_info(site, str(_pyproject(tree)["project"]["name"]), release.version)
    kinds = _probe(python, _WHERE, *WORKERS, *OPTIONAL_WORKERS)[1]
    installed = Installed(release, python, package, tuple(k for k in kinds.split(",") if k))
    installed.check_imports(_plain_env(), Path("/"))
    return installed
