"""The trust file: strict, checked when loaded, and every problem one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from pydantic import BaseModel, ValidationError

from callgate.auth.keys import new_private_key, public_key_text
from callgate.auth.trust import Delegate, Issuer, Person, Submitter, TrustConfig, load_trust
from callgate.errors import TrustConfigError


def _key() -> str:
    return public_key_text(new_private_key())


def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def _rsa_jwks(path: Path, kid: str = "idp-1") -> Path:
    public = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    jwk = {**RSAAlgorithm.to_jwk(public, as_dict=True), "kid": kid, "alg": "RS256"}
    return _write(path, {"keys": [jwk]})


def _load_error(tmp_path: Path, document: Any) -> str:
    path = _write(tmp_path / "trust.json", document)
    with pytest.raises(TrustConfigError) as caught:
        load_trust(path)
    message = caught.value.message
    assert str(path) in message and "\n" not in message
    error = caught.value  # no pydantic or json traceback chained under it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    return message


def test_a_complete_trust_file_loads(tmp_path: Path) -> None:
    _rsa_jwks(tmp_path / "idp.jwks.json")
    keys = {name: _key() for name in ("billing", "carol", "slack")}
    document = {
        "submitters": {"billing": {"public_key": keys["billing"], "grants": ["viewer"]}},
        "people": {
            "carol": {"roles": ["events-lead"], "public_key": keys["carol"]},
            "dave": {"roles": ["finance"]},
        },
        "delegates": {"slack": {"public_key": keys["slack"], "signs_for": ["*"]}},
        "issuers": {"https://idp.example": {"audience": "callgate", "jwks_file": "idp.jwks.json"}},
        "operator_role": "ops",
    }
    trust = load_trust(_write(tmp_path / "trust.json", document))
    assert trust.roles_of("carol") == frozenset({"events-lead"})
    assert trust.roles_of("mallory") == frozenset()
    assert trust.operator_role == "ops"
    for name, text in keys.items():
        key = trust.public_key_of(name)
        assert key is not None and public_key_text(key) == text
    assert trust.public_key_of("dave") is None  # acts only through the delegate
    assert trust.public_key_of("mallory") is None
    assert trust.submitters["billing"].users is None


def test_an_empty_trust_file_is_valid_and_trusts_nobody(tmp_path: Path) -> None:
    trust = load_trust(_write(tmp_path / "trust.json", {}))
    assert trust == TrustConfig()
    assert trust.operator_role == "operator"


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(TrustConfigError, match="does not exist") as caught:
        load_trust(path)
    assert str(path) in caught.value.message


def test_bad_json_says_where(tmp_path: Path) -> None:
    path = tmp_path / "trust.json"
    path.write_text('{"people": {\n  "carol": }\n}')
    with pytest.raises(TrustConfigError, match=r"not valid JSON \(line 2 column") as caught:
        load_trust(path)
    assert "\n" not in caught.value.message


def test_a_document_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    assert "must hold a JSON object" in _load_error(tmp_path, ["carol"])


def test_unknown_fields_are_refused_not_ignored(tmp_path: Path) -> None:
    document = {"people": {"carol": {"roles": [], "public_key": _key(), "admin": True}}}
    assert "people.carol.admin" in _load_error(tmp_path, document)
    assert "opertor_role" in _load_error(tmp_path, {"opertor_role": "x"})


def test_a_public_key_that_does_not_parse_names_its_entry(tmp_path: Path) -> None:
    document = {"submitters": {"billing": {"public_key": "ed25519:oops", "grants": []}}}
    message = _load_error(tmp_path, document)
    assert "submitters.billing.public_key" in message and "expected 43 characters" in message
    message = _load_error(tmp_path, {"people": {"carol": {"public_key": "carol's key"}}})
    assert "people.carol.public_key" in message


def test_a_key_id_is_unique_across_submitters_people_and_delegates(tmp_path: Path) -> None:
    document = {
        "people": {"carol": {"public_key": _key()}},
        "delegates": {"carol": {"public_key": _key(), "signs_for": ["*"]}},
    }
    assert "key id 'carol' is used twice (people, delegates)" in _load_error(tmp_path, document)
    document = {
        "submitters": {"ops": {"public_key": _key()}},
        "people": {"ops": {"roles": ["operator"]}},
    }
    assert "key id 'ops' is used twice (submitters, people)" in _load_error(tmp_path, document)


def test_the_wildcard_cannot_be_a_name(tmp_path: Path) -> None:
    assert "'*' cannot be a key id" in _load_error(tmp_path, {"people": {"*": {"roles": []}}})


def test_a_delegate_for_someone_not_in_people_is_a_typo_caught_at_load(tmp_path: Path) -> None:
    document = {
        "people": {"carol": {"roles": []}},
        "delegates": {"slack": {"public_key": _key(), "signs_for": ["carl"]}},
    }
    assert "signs for unknown people ['carl']" in _load_error(tmp_path, document)


def test_an_issuer_needs_keys(tmp_path: Path) -> None:
    document = {"issuers": {"https://idp.example": {"audience": "callgate"}}}
    assert "needs jwks_file or public_keys" in _load_error(tmp_path, document)


@pytest.mark.parametrize("algorithm", ["HS256", "none"])
def test_an_issuer_may_not_use_symmetric_or_no_signatures(tmp_path: Path, algorithm: str) -> None:
    issuer = {"audience": "callgate", "public_keys": [_key()], "algorithms": [algorithm]}
    message = _load_error(tmp_path, {"issuers": {"https://idp.example": issuer}})
    assert "issuers.https://idp.example.algorithms" in message and algorithm in message


def test_an_issuer_key_that_fits_none_of_its_algorithms_is_refused(tmp_path: Path) -> None:
    issuer = {"audience": "callgate", "public_keys": [_key()], "algorithms": ["RS256"]}
    message = _load_error(tmp_path, {"issuers": {"https://idp.example": issuer}})
    assert "fits none of ['RS256']" in message


def test_an_issuer_takes_pem_public_keys(tmp_path: Path) -> None:
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    issuer = {"audience": "callgate", "public_keys": [pem, _key()]}
    trust = load_trust(_write(tmp_path / "trust.json", {"issuers": {"https://idp": issuer}}))
    assert len(trust.issuers["https://idp"].verification_keys(None, "RS256")) == 1
    assert len(trust.issuers["https://idp"].verification_keys(None, "EdDSA")) == 1


def test_a_relative_jwks_file_is_found_next_to_the_trust_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "deploy"
    folder.mkdir()
    _rsa_jwks(folder / "idp.json")
    document = {"issuers": {"https://idp": {"audience": "callgate", "jwks_file": "idp.json"}}}
    trust_path = _write(folder / "trust.json", document)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    trust = load_trust(trust_path)
    assert trust.issuers["https://idp"].jwks_file == folder / "idp.json"
    assert len(trust.issuers["https://idp"].verification_keys("idp-1", "RS256")) == 1


@pytest.mark.parametrize(
    ("content", "complaint"),
    [(None, "cannot be read"), ("[1, 2]", "not a usable JWKS"), ('{"keys": []}', "usable JWKS")],
)
def test_a_jwks_file_that_cannot_be_used_fails_at_load(
    tmp_path: Path, content: str | None, complaint: str
) -> None:
    if content is not None:
        (tmp_path / "idp.json").write_text(content)
    document = {"issuers": {"https://idp": {"audience": "callgate", "jwks_file": "idp.json"}}}
    message = _load_error(tmp_path, document)
    assert complaint in message and str(tmp_path / "idp.json") in message


def test_a_jwks_without_a_key_for_the_issuers_algorithms_fails_at_load(tmp_path: Path) -> None:
    _rsa_jwks(tmp_path / "idp.json")
    issuer = {"audience": "callgate", "jwks_file": "idp.json", "algorithms": ["ES256"]}
    assert "has no key for the algorithms" in _load_error(tmp_path, {"issuers": {"i": issuer}})


def test_the_models_are_frozen_and_strict_in_code_too() -> None:
    person = Person(roles=["events-lead"], public_key=_key())
    with pytest.raises(ValidationError):
        person.roles = ["operator"]  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Submitter(public_key=_key(), grant=["*"])  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="is used twice"):
        TrustConfig(
            submitters={"x": Submitter(public_key=_key())},
            delegates={"x": Delegate(public_key=_key(), signs_for=[])},
        )


@pytest.mark.parametrize("model", [Submitter, Person, Delegate, Issuer, TrustConfig])
def test_every_field_says_what_it_is_for(model: type[BaseModel]) -> None:
    undocumented = [name for name, field in model.model_fields.items() if not field.description]
    assert undocumented == []
