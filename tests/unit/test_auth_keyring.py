"""The local keyring: zero configuration on one machine, private files, and a trust file that
only ever grows, even when several processes set it up at once."""

from __future__ import annotations

import json
import multiprocessing
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from callgate.auth.deployment import signer_of
from callgate.auth.keyring import DEFAULT_PEOPLE, LocalKeyring, default_home
from callgate.auth.keys import new_private_key, public_key_text, read_private_key, write_private_key
from callgate.auth.tokens import sign_decision, sign_submission, verify_decision, verify_submission
from callgate.auth.trust import TrustConfig, load_trust
from callgate.config import Settings
from callgate.errors import KeyFileError, TrustConfigError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_keys_match_entries(keyring: LocalKeyring, trust: TrustConfig) -> None:
    """Every entry with a key file lists exactly that file's key."""
    for name in [*trust.submitters, *trust.people]:
        path = keyring.key_path(name)
        if path.exists():
            listed = trust.public_key_of(name)
            assert listed is not None
            assert public_key_text(listed) == public_key_text(read_private_key(path))


def test_ensure_sets_up_a_working_machine_from_nothing(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path / "home")
    trust = keyring.ensure()
    assert trust == load_trust(keyring.trust_file)
    assert trust.submitters["local"].grants == ["*"]
    assert {name: trust.people[name].roles for name in trust.people} == DEFAULT_PEOPLE
    _assert_keys_match_entries(keyring, trust)
    spec = {"task": "t"}
    submission = sign_submission(keyring.signer("local"), run_id="r1", spec=spec)
    assert verify_submission(submission, trust, run_id="r1", spec=spec, now=time.time()) == "local"
    decision = sign_decision(
        keyring.signer("carol"), person="carol", claims={"act": "a", "run": "r"}
    )
    assert verify_decision(decision, trust, now=time.time()).roles == {"events-lead"}


def test_keys_and_the_trust_file_are_private(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path / "home")
    keyring.ensure()
    assert _mode(keyring.keys_dir) == 0o700
    assert _mode(keyring.home) == 0o700
    assert _mode(keyring.trust_file) == 0o600
    for name in ("local", "carol", "operator"):
        assert _mode(keyring.key_path(name)) == 0o600


def test_ensure_again_changes_nothing(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    keyring.ensure()
    before = {p.name: p.read_bytes() for p in [keyring.trust_file, *keyring.keys_dir.iterdir()]}
    written_at = keyring.trust_file.stat().st_mtime_ns
    keyring.ensure()
    after = {p.name: p.read_bytes() for p in [keyring.trust_file, *keyring.keys_dir.iterdir()]}
    assert after == before
    assert keyring.trust_file.stat().st_mtime_ns == written_at


def test_ensure_only_adds_and_keeps_existing_entries_as_they_are(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    carol_elsewhere = public_key_text(new_private_key())  # her key lives on her laptop
    slack = public_key_text(new_private_key())
    existing: dict[str, Any] = {
        "people": {"carol": {"roles": ["finance"], "public_key": carol_elsewhere}},
        "delegates": {"slack": {"public_key": slack, "signs_for": ["carol"]}},
        "operator_role": "ops",
    }
    keyring.trust_file.write_text(json.dumps(existing))
    trust = keyring.ensure()
    document = json.loads(keyring.trust_file.read_text())
    assert document["people"]["carol"] == existing["people"]["carol"]
    assert document["delegates"] == existing["delegates"]
    assert document["operator_role"] == "ops"
    assert set(document["people"]) == {"carol", "operator"} and "local" in document["submitters"]
    assert not keyring.key_path("carol").exists()  # no key made for someone already registered
    assert trust.roles_of("carol") == {"finance"}
    _assert_keys_match_entries(keyring, trust)


def test_a_name_taken_by_a_delegate_gets_no_person_entry(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    bot = {"public_key": public_key_text(new_private_key()), "signs_for": ["*"]}
    keyring.trust_file.write_text(json.dumps({"delegates": {"operator": bot}}))
    trust = keyring.ensure()
    assert "operator" not in trust.people and trust.delegates["operator"].signs_for == ["*"]


def test_ensure_refuses_to_build_on_a_broken_trust_file(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    keyring.trust_file.write_text('{"people": ')
    with pytest.raises(TrustConfigError, match="not valid JSON"):
        keyring.ensure()
    keyring.trust_file.write_text('{"people": {"carol": {"public_key": "mine"}}}')
    with pytest.raises(TrustConfigError, match=r"people\.carol\.public_key"):
        keyring.ensure()
    assert keyring.trust_file.read_text() == '{"people": {"carol": {"public_key": "mine"}}}'
    assert not keyring.keys_dir.exists()  # nothing made for a file that cannot take it


def test_ensure_registers_a_key_that_exists_without_an_entry(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    path, _ = keyring.new_person("dave", ["finance"])
    made = public_key_text(read_private_key(path))
    trust = keyring.ensure({"dave": ["finance"]})
    assert trust.people["dave"].public_key == made


def test_a_missing_signer_says_how_to_make_one(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path / "home")
    with pytest.raises(KeyFileError) as caught:
        keyring.signer("carol")
    assert caught.value.message == (
        f"no key for carol in {tmp_path / 'home' / 'keys'}: run `callgate keys new carol`"
    )


def test_new_person_makes_a_key_and_a_snippet_but_does_not_trust_it(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    keyring.ensure()
    trust_before = keyring.trust_file.read_bytes()
    path, snippet = keyring.new_person("dave", ["finance", "approver"])
    assert path == keyring.key_path("dave") and _mode(path) == 0o600
    assert "\n" not in snippet
    entry = json.loads("{" + snippet + "}")
    public_key = public_key_text(read_private_key(path))
    assert entry == {"dave": {"roles": ["finance", "approver"], "public_key": public_key}}
    assert keyring.trust_file.read_bytes() == trust_before
    assert "dave" not in load_trust(keyring.trust_file).people


def test_new_person_never_replaces_a_key(tmp_path: Path) -> None:
    keyring = LocalKeyring(tmp_path)
    path, _ = keyring.new_person("dave", [])
    first = path.read_bytes()
    with pytest.raises(FileExistsError):
        keyring.new_person("dave", [])
    assert path.read_bytes() == first


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "", "carol\n"])
def test_a_key_name_cannot_escape_the_keys_folder(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="not a key name"):
        LocalKeyring(tmp_path).key_path(name)


def test_default_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CALLGATE_HOME", str(tmp_path / "cg"))
    assert default_home() == tmp_path / "cg"
    monkeypatch.delenv("CALLGATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_home() == tmp_path / ".callgate"


def _ensure_at_once(home: str, person: str, start: multiprocessing.synchronize.Barrier) -> None:
    """One process of the race: wait for the others, then set up the same home."""
    start.wait(timeout=30)
    LocalKeyring(Path(home)).ensure({**DEFAULT_PEOPLE, person: ["racer"]})


@pytest.mark.parametrize("round_", range(3))
def test_processes_ensuring_at_once_end_with_one_consistent_trust_file(
    tmp_path: Path, round_: int
) -> None:
    context = multiprocessing.get_context("fork")
    racers = [f"racer{i}" for i in range(4)]
    start = context.Barrier(len(racers))
    home = tmp_path / f"home{round_}"
    processes = [
        context.Process(target=_ensure_at_once, args=(str(home), name, start)) for name in racers
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        if process.is_alive():  # a stuck racer must not outlive the test
            process.kill()
    assert [process.exitcode for process in processes] == [0] * len(racers)
    keyring = LocalKeyring(home)
    trust = load_trust(keyring.trust_file)
    assert set(trust.people) == {*DEFAULT_PEOPLE, *racers}  # nobody's entry was lost
    _assert_keys_match_entries(keyring, trust)
    assert sorted(p.name for p in keyring.keys_dir.iterdir()) == sorted(
        f"{name}.pem" for name in ["local", *DEFAULT_PEOPLE, *racers]
    )  # and no temporary file was left behind


def test_a_process_signs_as_itself_with_its_signing_key(tmp_path: Path) -> None:
    """The Slack bot of a deployment signs as ``slack`` with the bundle's delegate key
    (CALLGATE_SUBMITTER=slack, CALLGATE_SIGNING_KEY=…), not with a keyring it does not have;
    any other name still comes from the keyring."""
    key_file, key = tmp_path / "slack.pem", new_private_key()
    write_private_key(key_file, key)
    settings = Settings(home=tmp_path / "home", submitter="slack", signing_key=key_file)
    signer = signer_of(settings, "slack")
    assert signer.key_id == "slack" and public_key_text(signer.key) == public_key_text(key)
    with pytest.raises(KeyFileError, match="no key for carol"):
        signer_of(settings, "carol")
