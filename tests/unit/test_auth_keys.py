"""Key files: private on disk, never silently replaced, and refused with a useful message when
unusable; public keys in one strict text form."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.keys import (
    new_private_key,
    parse_public_key,
    public_key_text,
    read_private_key,
    write_private_key,
)
from callgate.errors import CallgateError, KeyFileError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _raw_public(key: object) -> bytes:
    assert hasattr(key, "public_bytes")
    raw: bytes = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def test_a_written_key_reads_back_as_the_same_key(tmp_path: Path) -> None:
    key = new_private_key()
    path = tmp_path / "keys" / "carol.pem"
    write_private_key(path, key)
    assert _raw(read_private_key(path)) == _raw(key)
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_the_key_file_is_0600_and_the_folder_it_creates_0700(tmp_path: Path, umask: int) -> None:
    old_umask = os.umask(umask)  # whatever the umask: lax, usual, or one that strips the owner
    try:
        path = tmp_path / "keys" / "carol.pem"  # one new folder: 0o277 would lock out its parent
        write_private_key(path, new_private_key())
    finally:
        os.umask(old_umask)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_an_existing_key_is_not_overwritten_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    first, second = new_private_key(), new_private_key()
    write_private_key(path, first)
    with pytest.raises(FileExistsError, match="already exists"):
        write_private_key(path, second)
    assert _raw(read_private_key(path)) == _raw(first)
    write_private_key(path, second, overwrite=True)
    assert _raw(read_private_key(path)) == _raw(second)
    assert _mode(path) == 0o600


def test_writing_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    write_private_key(path, new_private_key())
    with pytest.raises(FileExistsError):
        write_private_key(path, new_private_key())
    assert [p.name for p in tmp_path.iterdir()] == ["carol.pem"]


def test_a_missing_key_file_names_the_path_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "nobody.pem"
    with pytest.raises(KeyFileError) as caught:
        read_private_key(path)
    assert str(path) in caught.value.message
    assert "callgate keys new" in caught.value.message
    assert "\n" not in caught.value.message
    assert isinstance(caught.value, CallgateError)


def test_an_unreadable_key_file_is_a_key_file_error(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    path.mkdir()  # a folder where the file should be: unreadable as a file, even for root
    with pytest.raises(KeyFileError, match="cannot be read"):
        read_private_key(path)


def test_a_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    path.write_text("ssh-ed25519 AAAAC3Nza... carol@laptop\n")
    with pytest.raises(KeyFileError, match="not an unencrypted PEM private key") as caught:
        read_private_key(path)
    assert str(path) in caught.value.message


def test_an_encrypted_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    path.write_bytes(
        new_private_key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(KeyFileError, match="not an unencrypted PEM private key"):
        read_private_key(path)


def test_a_key_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "carol.pem"
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(KeyFileError, match="not an Ed25519 key") as caught:
        read_private_key(path)
    assert str(path) in caught.value.message


def test_public_key_text_round_trips_from_private_and_public_keys() -> None:
    key = new_private_key()
    text = public_key_text(key)
    assert text == public_key_text(key.public_key())
    assert text.startswith("ed25519:") and "=" not in text
    assert base64.urlsafe_b64decode(text.removeprefix("ed25519:") + "=") == _raw(key)
    assert _raw_public(parse_public_key(text)) == _raw(key)


def test_a_pem_public_key_is_accepted() -> None:
    key = new_private_key()
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert _raw_public(parse_public_key(pem.decode())) == _raw(key)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "must look like"),
        ("AAAA", "must look like"),
        ("rsa:" + "A" * 43, "must look like"),
        ("ed25519:not base64!", "expected 43 characters of unpadded base64url"),
        ("ed25519:" + "A" * 22, "expected 43 characters"),
        ("ed25519:" + "A" * 44, "expected 43 characters"),
        ("ed25519:" + "A" * 42 + "=", "expected 43 characters"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", "not a valid public key"),
    ],
)
def test_anything_else_is_a_clear_value_error(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_public_key(text)


def test_characters_outside_base64url_are_refused_not_skipped() -> None:
    text = public_key_text(new_private_key())
    for intruder in ("*", " ", "+", "/", "="):
        with pytest.raises(ValueError, match="expected 43 characters of unpadded base64url"):
            parse_public_key(text[:20] + intruder + text[21:])  # still 43 characters


def test_a_non_canonical_encoding_of_a_key_is_refused() -> None:
    text = public_key_text(new_private_key())
    last = text[-1]
    # 43 characters carry 258 bits for 256: flipping the last unused bit keeps the same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = text[:-1] + alphabet[alphabet.index(last) ^ 1]
    assert base64.urlsafe_b64decode(twin[8:] + "=") == base64.urlsafe_b64decode(text[8:] + "=")
    with pytest.raises(ValueError, match="canonical"):
        parse_public_key(twin)


def test_a_pem_public_key_of_another_kind_is_refused() -> None:
    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ValueError, match="not an Ed25519 key"):
        parse_public_key(pem.decode())
