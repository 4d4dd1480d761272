"""`callgate keys new` / `keys list` against a keyring in a temporary CALLGATE_HOME: the key is
private, the printed public key is the one that verifies what the private key signs, and an
existing key is never replaced without --force."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from callgate.auth.keys import read_private_key
from callgate.auth.tokens import Signer, sign_decision, verify_access, verify_decision
from callgate.auth.trust import Person, TrustConfig
from callgate.errors import AuthError
from callgate.ops.cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CALLGATE_HOME", str(home))
    return home


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _new(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["keys", "new", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_new_key_is_private_and_its_printed_public_key_verifies_its_signature(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _new(capsys, "dave", "--role", "finance", "--role", "approver")
    assert code == 0, err
    key_file = home / "keys" / "dave.pem"
    assert _mode(key_file) == 0o600 and _mode(home / "keys") == 0o700
    public_key, entry_line = out.splitlines()
    entry = json.loads("{" + entry_line + "}")
    assert entry == {"dave": {"roles": ["finance", "approver"], "public_key": public_key}}
    assert "PRIVATE" not in out + err
    assert not (home / "trust.json").exists(), "registering is the deployment's act"

    trust = TrustConfig(people={"dave": Person(roles=["finance"], public_key=public_key)})
    signer = Signer("dave", read_private_key(key_file))
    token = sign_decision(signer, person="dave", claims={"act": "approve", "run": "r1"})
    verified = verify_decision(token, trust, now=time.time())
    assert (verified.person, verified.signer, verified.roles) == ("dave", "dave", {"finance"})
    pasted = TrustConfig.model_validate({"people": entry})
    assert verify_decision(token, pasted, now=time.time()).person == "dave"


def test_second_new_without_force_is_a_conflict_and_keeps_the_key(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _new(capsys, "dave")[0] == 0
    key_file = home / "keys" / "dave.pem"
    before = key_file.read_bytes()
    code, out, err = _new(capsys, "dave", "--role", "finance")
    assert code == 3 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--force" in err and "Traceback" not in err
    assert key_file.read_bytes() == before

    code, out, err = _new(capsys, "dave", "--force")
    assert code == 0, err
    assert key_file.read_bytes() != before and _mode(key_file) == 0o600
    assert "replaced" in err


def test_list_shows_names_and_public_keys_never_private_ones(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "list"]) == 0
    assert "no keys" in capsys.readouterr().err
    printed = {name: _new(capsys, name)[1].splitlines()[0] for name in ("dave", "carol")}
    assert main(["keys", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == [{"name": n, "public_key": printed[n]} for n in ("carol", "dave")]
    assert main(["keys", "list"]) == 0
    out = capsys.readouterr().out
    assert printed["dave"] in out and "PRIVATE" not in out


@pytest.mark.parametrize(
    "args", [["../evil"], [".hidden"], ["dave", "--role", "two words"], ["dave", "--role", ""]]
)
def test_unusable_name_or_role_is_a_usage_error(
    home: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, out, err = _new(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (home / "keys").exists() or not any((home / "keys").iterdir())


def test_missing_name_is_argparse_usage(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["keys", "new"])
    assert exited.value.code == 2


def test_unwritable_home_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CALLGATE_HOME", str(blocker))
    code, _, err = _new(capsys, "dave")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "CALLGATE_HOME" in err


def test_token_prints_a_short_lived_bearer_the_api_takes_for_that_person_only(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _new(capsys, "erin", "--role", "operator")
    assert code == 0, err
    public_key = out.splitlines()[0]
    trust = TrustConfig(people={"erin": Person(roles=["operator"], public_key=public_key)})
    assert main(["keys", "token", "erin", "--ttl", "60"]) == 0
    token = capsys.readouterr().out.strip()
    assert verify_access(token, trust, now=time.time()) == "erin"
    with pytest.raises(AuthError, match="expired"):
        verify_access(token, trust, now=time.time() + 3600)
    assert main(["keys", "token", "erin", "--ttl", "86400"]) == 2
    assert "--ttl must be in" in capsys.readouterr().err
    assert main(["keys", "token", "nobody"]) == 1
    assert "callgate keys new nobody" in capsys.readouterr().err
