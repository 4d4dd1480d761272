"""`TrustSource`: a trust file mid-edit never takes effect.  A version that does not load leaves
the last one that did in force, is logged once with its reason, and is read again as soon as it
changes; the file loads at start-up or the process does not start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.auth.deployment import TrustSource
from callgate.auth.keys import new_private_key, public_key_text
from callgate.config import Settings
from callgate.errors import TrustConfigError
from callgate.ops.cli import main


def document(*people: str) -> str:
    return json.dumps({"people": {name: {"roles": ["events-lead"],
                                         "public_key": public_key_text(new_private_key())}
                                  for name in people}})  # fmt: skip


def save(path: Path, text: str) -> None:
    """Write ``text`` with a modification time of its own (a fast test can beat the clock)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The reason of each refusal logged."""
    return [str(r.__dict__["fields"]["reason"]) for r in caplog.records
            if "trust file does not load" in r.getMessage()]  # fmt: skip


def test_a_bad_version_keeps_the_last_good_one_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "trust.json"
    save(path, document("carol"))
    source = TrustSource(Settings(trust_file=path))
    assert set(source.current().people) == {"carol"}
    for bad in ("", '{"people": {"carol": {"roles": ["events-lead"], "public_k'):
        save(path, bad)
        for _ in range(3):
            assert set(source.current().people) == {"carol"}
    assert len(refusals(caplog)) == 2, "once per bad version"
    assert "not valid JSON" in refusals(caplog)[0]
    save(path, document("carol", "dave"))
    assert set(source.current().people) == {"carol", "dave"}


def test_a_vanished_file_keeps_the_last_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "trust.json"
    save(path, document("carol"))
    source = TrustSource(Settings(trust_file=path))
    path.unlink()
    assert set(source.current().people) == {"carol"}
    assert "is gone" in refusals(caplog)[0]
    save(path, "{}")  # trusting nobody is written, not deleted
    assert source.current().people == {}


def test_a_file_that_does_not_load_at_start_up_stops_the_process(tmp_path: Path) -> None:
    path = tmp_path / "trust.json"
    save(path, "{")
    with pytest.raises(TrustConfigError, match="not valid JSON"):
        TrustSource(Settings(trust_file=path))
    path.unlink()
    assert TrustSource(Settings(trust_file=path)).current().people == {}  # none: nobody trusted


def test_callgate_doctor_names_a_bad_trust_file(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    path = tmp_path / "trust.json"
    save(path, '{"people": ')
    monkeypatch.setenv("CALLGATE_TRUST_FILE", str(path))
    monkeypatch.setenv("CALLGATE_HOME", str(tmp_path / "home"))  # no local keys
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    assert main(["doctor"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines()[0] == (
        f"BAD trust file {path} is not valid JSON (line 1 column 12: Expecting value)"
        " — the workers keep the last version that loaded until it is fixed"
    )
    assert "ok  Redis login default at redis://127.0.0.1:" in out
    save(path, document("carol"))
    assert main(["doctor", "--no-redis"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"ok  trust file {path}: 0 submitters, 1 people, 0 delegates, 0 issuers"
    )


@pytest.mark.parametrize("service", ["validator", "ingress"])
def test_a_worker_whose_trust_file_does_not_load_says_so_in_one_line(
    tmp_path: Path, settings: Settings, service: str
) -> None:
    """A real worker process started on a broken trust file stops at once with exit 2 and one
    error line naming the file, not a traceback."""
    path = tmp_path / "trust.json"
    save(path, '{"people": {"carol": ')
    env = {
        **os.environ,
        "REDIS_URL": settings.redis_url,
        "CALLGATE_TRUST_FILE": str(path),
        "CALLGATE_KEY_PREFIX": settings.key_prefix,
    }
    done = subprocess.run(
        [sys.executable, "-m", f"callgate.services.{service}"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(errors) == 1 and str(path) in errors[0] and "not valid JSON" in errors[0]
