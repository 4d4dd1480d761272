"""Which release the upgrade test installs, found in a throwaway repository: the newest CHANGELOG
section other than pyproject's version, by its tag, else by the commit it names; a clear error
(never a skip) when git cannot find either or cannot run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.upgrade.previous_release import PreviousReleaseError, Release, previous_release


def git(root: Path, *args: str) -> str:
    who = ("-c", "user.name=test", "-c", "user.email=test@example.invalid")
    done = subprocess.run(["git", *who, "-C", str(root), *args], capture_output=True, check=True)
    return done.stdout.decode().strip()


def release_repo(root: Path, version: str, tags: bool = True) -> dict[str, str]:
    """Two releases (0.1.0, 0.2.0), each tagged when ``tags``, then pyproject at ``version``
    and a CHANGELOG naming both; their short commits by version."""
    git(root, "init", "-q")
    commits = {}
    for released in ("0.1.0", "0.2.0"):
        (root / "pyproject.toml").write_text(f'[project]\nversion = "{released}"\n')
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", released)
        commits[released] = git(root, "rev-parse", "--short=7", "HEAD")
        if tags:
            git(root, "tag", "-a", f"v{released}", "-m", released)
    sections = [f"## {v} — 2026-12-0{n} (commit {c})\n\n- …\n" for n, (v, c) in enumerate(
        sorted(commits.items(), reverse=True), start=1)]  # fmt: skip
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## Unreleased\n\n" + "\n".join(sections))
    (root / "pyproject.toml").write_text(f'[project]\nversion = "{version}"\n')
    return commits


def test_the_newest_other_release_by_its_tag(tmp_path: Path) -> None:
    commits = release_repo(tmp_path, "0.3.0.dev0")
    assert previous_release(tmp_path) == Release("0.2.0", commits["0.2.0"], "v0.2.0")


def test_a_released_version_upgrades_from_the_one_before(tmp_path: Path) -> None:
    commits = release_repo(tmp_path, "0.2.0")
    assert previous_release(tmp_path) == Release("0.1.0", commits["0.1.0"], "v0.1.0")


def test_without_tags_the_commit_the_changelog_names(tmp_path: Path) -> None:
    commits = release_repo(tmp_path, "0.3.0.dev0", tags=False)
    assert previous_release(tmp_path) == Release("0.2.0", commits["0.2.0"], commits["0.2.0"])


def test_a_commit_git_does_not_know_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    release_repo(tmp_path, "0.3.0.dev0", tags=False)
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("## 0.2.1 — 2026-12-09 (commit 0000000)\n\n" + changelog.read_text())
    with pytest.raises(PreviousReleaseError, match=r"neither the tag v0\.2\.1 nor commit 0{7}"):
        previous_release(tmp_path)


def test_no_git_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release_repo(tmp_path, "0.3.0.dev0")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(PreviousReleaseError, match="git rev-parse could not run"):
        previous_release(tmp_path)
