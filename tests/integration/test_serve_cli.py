"""`callgate serve` refuses to start, in one line and exit code 1, when it could not sign what it
relays (no submitter key, no delegate key), and says a bad port is a usage error (2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.auth.keyring import LocalKeyring
from callgate.ops.cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CALLGATE_HOME", str(home))
    monkeypatch.setenv("CALLGATE_TRUST_FILE", str(home / "trust.json"))
    monkeypatch.delenv("CALLGATE_SIGNING_KEY", raising=False)
    return home


def test_serve_without_keys_says_which_and_exits_1(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "callgate keys new local" in err
    LocalKeyring(home).ensure({}, {})  # the submitter's key, but no delegate key `api`
    assert main(["serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "callgate keys new api" in err and "Traceback" not in err


def test_a_port_out_of_range_is_a_usage_error(home: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "70000"])
    assert exited.value.code == 2
