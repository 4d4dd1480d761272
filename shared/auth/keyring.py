"""The local keyring: one machine works securely with zero configuration.

``$CALLGATE_HOME`` (default ``~/.callgate``) holds ``keys/<name>.pem`` (0600, folder 0700) and
``trust.json``.  `LocalKeyring.ensure` makes what is missing: a ``local`` submitter that may
grant any role, and a key and a trust entry for each default person.  It only ever adds: an
entry already in ``trust.json`` keeps its values, a file with nothing to add is not rewritten,
and a name that has an entry gets no key made (its entry may list a key that lives on another
machine).  Every change to ``trust.json`` is
a read-modify-write under an exclusive ``flock``, so two processes starting at once (the
supervisor's workers) cannot lose each other's entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from callgate.auth.keys import (
    ensure_private_dir,
    new_private_key,
    public_key_text,
    read_private_key,
    write_private_key,
    write_secret_file,
)
from callgate.auth.tokens import Signer
from callgate.auth.trust import ANY, TrustConfig, read_trust_document, trust_from_document
from callgate.errors import KeyFileError

LOCAL_SUBMITTER = "local"
"""The key id of this machine's own submitting service."""

DEFAULT_PEOPLE: dict[str, list[str]] = {"carol": ["events-lead"], "operator": ["operator"]}
"""The people a fresh machine gets, by name, with their roles."""

_KEYED_SECTIONS = ("submitters", "people", "delegates")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
"""A key name is also a file name: no separators, no leading dot."""


def default_home() -> Path:
    """``$CALLGATE_HOME``, else ``~/.callgate``."""
    configured = os.environ.get("CALLGATE_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".callgate"


class LocalKeyring:
    """Private keys and the trust file of one machine, under ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.keys_dir = home / "keys"
        self.trust_file = home / "trust.json"

    def key_path(self, name: str) -> Path:
        """Where the private key named ``name`` lives (ValueError for a name unsafe as a file)."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a key name: use letters, digits and . _ @ -")
        return self.keys_dir / f"{name}.pem"

    def ensure(
        self,
        people: Mapping[str, Sequence[str]] = DEFAULT_PEOPLE,
        delegates: Mapping[str, Sequence[str]] | None = None,
    ) -> TrustConfig:
        """Create whatever is missing of the local submitter, ``people`` (name → roles) and
        ``delegates`` (a service's key → the people it signs for); the resulting trust."""
        delegates = delegates or {}
        with self._locked():
            document = self._document()
            known = {name for section in _KEYED_SECTIONS for name in document.get(section, {})}
            missing = [n for n in (LOCAL_SUBMITTER, *people, *delegates) if n not in known]
            for name in missing:
                if name == LOCAL_SUBMITTER:
                    entry = {"public_key": self._key_text(name), "grants": [ANY]}
                    document.setdefault("submitters", {})[name] = entry
                elif name in people:
                    entry = {"roles": list(people[name]), "public_key": self._key_text(name)}
                    document.setdefault("people", {})[name] = entry
                else:
                    entry = {"public_key": self._key_text(name), "signs_for": list(delegates[name])}
                    document.setdefault("delegates", {})[name] = entry
            return self._save(document, changed=bool(missing))

    def signer(self, name: str) -> Signer:
        """The signer for ``name``'s private key in this keyring."""
        path = self.key_path(name)
        if not path.exists():
            raise KeyFileError(
                f"no key for {name} in {self.keys_dir}: run `callgate keys new {name}`"
            )
        return Signer(key_id=name, key=read_private_key(path))

    def new_person(
        self, name: str, roles: Sequence[str], *, overwrite: bool = False
    ) -> tuple[Path, str]:
        """Make ``name``'s key and return its path and the one-line trust entry the deployment
        must register; this keyring's trust file is left alone.  An existing key is replaced
        only with ``overwrite`` (FileExistsError otherwise): its owner's trust entries die."""
        path, public_key = self.new_key(name, overwrite=overwrite)
        entry = {"roles": list(roles), "public_key": public_key}
        return path, f"{json.dumps(name)}: {json.dumps(entry)}"

    def new_key(self, name: str, *, overwrite: bool = False) -> tuple[Path, str]:
        """Make ``name``'s private key here; its path and public key text.  FileExistsError
        when it has one and ``overwrite`` is false."""
        path = self.key_path(name)
        key = new_private_key()
        write_private_key(path, key, overwrite=overwrite)
        return path, public_key_text(key)

    def key_names(self) -> list[str]:
        """The names that have a private key here, sorted (temporary files are not keys)."""
        if not self.keys_dir.is_dir():
            return []
        return sorted(
            path.stem for path in self.keys_dir.glob("*.pem") if _NAME.fullmatch(path.stem)
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the keyring's lock file; released when the process ends, even by a crash."""
        ensure_private_dir(self.home)
        fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _document(self) -> dict[str, Any]:
        """The trust file as written (so entries are kept as they are), or an empty one."""
        if not self.trust_file.exists():
            return {}
        document = read_trust_document(self.trust_file)
        trust_from_document(document, path=self.trust_file)  # never build on a broken file
        return document

    def _key_text(self, name: str) -> str:
        """The public key of ``name``'s private key, made first if it does not exist yet."""
        path = self.key_path(name)
        if not path.exists():
            write_private_key(path, new_private_key())
        return public_key_text(read_private_key(path))

    def _save(self, document: dict[str, Any], *, changed: bool) -> TrustConfig:
        """Validate, then write ``trust.json`` (0600, atomically) if anything was added."""
        trust = trust_from_document(document, path=self.trust_file)
        if changed or not self.trust_file.exists():
            data = (json.dumps(document, indent=2) + "\n").encode()
            write_secret_file(self.trust_file, data, overwrite=True)
        return trust
