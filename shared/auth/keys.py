"""Ed25519 key files and the text form of public keys.

A private key is a PEM PKCS8 file, mode 0600 in a folder of mode 0700, written atomically: a
reader sees no key or the whole key, never half of one, and an existing key is never replaced
unless the caller asks (replacing a key silently locks its owner out of every trust file that
lists the old one).  A public key travels as ``ed25519:`` + the raw 32 bytes in unpadded
base64url, short enough for a trust file, a log line or a chat message.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import tempfile
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from callgate.errors import KeyFileError

PUBLIC_KEY_PREFIX = "ed25519:"
_ENCODED_KEY = re.compile(r"[A-Za-z0-9_-]{43}")
"""32 bytes in unpadded base64url: 43 characters of the URL-safe alphabet, nothing else."""


def new_private_key() -> Ed25519PrivateKey:
    """A fresh random Ed25519 key."""
    return Ed25519PrivateKey.generate()


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and its parents) if missing; a folder this creates gets mode 0700.

    An existing folder keeps its mode: it belongs to whoever made it.
    """
    if path.is_dir():
        return
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)  # mkdir's mode is reduced by the umask


def write_secret_file(path: Path, data: bytes, *, overwrite: bool = False) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600.

    The bytes go to a temporary file in the same folder first (0600 whatever the umask,
    fsynced), which then takes the final name in one step: ``os.replace`` when overwriting,
    otherwise ``os.link``, which fails if the name exists, so two writers racing for a new
    file cannot both win.  Raises FileExistsError when the file exists and ``overwrite`` is
    false.
    """
    ensure_private_dir(path.parent)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), 0o600)  # mkstemp's 0600 is reduced by the umask too
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        if overwrite:
            os.replace(tmp_name, path)
        else:
            try:
                os.link(tmp_name, path)
            except FileExistsError:
                raise FileExistsError(f"{path} already exists; not replacing it") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    """Make the new name durable, not only the bytes behind it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private_key(path: Path, key: Ed25519PrivateKey, *, overwrite: bool = False) -> None:
    """Save ``key`` as unencrypted PEM PKCS8, mode 0600, atomically; see `write_secret_file`."""
    pem = key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    write_secret_file(path, pem, overwrite=overwrite)


def read_private_key(path: Path) -> Ed25519PrivateKey:
    """Load an Ed25519 private key written by `write_private_key` (or any unencrypted PEM)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {path} does not exist: create it with `callgate keys new NAME` "
            "or point to the right file"
        ) from None
    except OSError as exc:
        raise KeyFileError(
            f"key file {path} cannot be read ({exc.strerror or exc}): fix its permissions"
        ) from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(
            f"key file {path} is not an unencrypted PEM private key: replace it with one made "
            "by `callgate keys new NAME`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(
            f"key file {path} holds a {type(key).__name__.removeprefix('_')}, not an Ed25519 "
            "key: replace it with one made by `callgate keys new NAME`"
        )
    return key


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """``ed25519:<base64url of the raw 32-byte public key, unpadded>``."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )
    return PUBLIC_KEY_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """The Ed25519 public key in ``text``: the ``ed25519:`` form or a PEM public key.

    Raises ValueError saying what was expected for anything else, including a text that is
    not the one canonical encoding of exactly 32 bytes (so one key has one text).
    """
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        return _parse_pem_public_key(stripped)
    if not stripped.startswith(PUBLIC_KEY_PREFIX):
        raise ValueError(
            f"a public key must look like '{PUBLIC_KEY_PREFIX}<base64url>' or be a PEM public "
            f"key, not {_preview(stripped)}"
        )
    encoded = stripped.removeprefix(PUBLIC_KEY_PREFIX)
    if not _ENCODED_KEY.fullmatch(encoded):
        raise ValueError(
            f"{_preview(stripped)} is not an Ed25519 public key: expected 43 characters of "
            f"unpadded base64url (32 bytes) after '{PUBLIC_KEY_PREFIX}'"
        )
    key = Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(encoded + "="))
    if public_key_text(key) != stripped:
        raise ValueError(f"{_preview(stripped)} is not the canonical text of its key")
    return key


def _parse_pem_public_key(pem: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError):
        raise ValueError("the PEM text is not a valid public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the PEM public key is not an Ed25519 key")
    return key


def _preview(text: str) -> str:
    """Enough of a bad value to recognise it in an error, never a whole pasted secret."""
    return repr(text if len(text) <= 60 else text[:57] + "...")
