"""This deployment's trust and this process's own key, from its settings.

Workers read the trust file through a `TrustSource`, which reads it again when it changes (a
deployment that registers an approver need not restart its workers); a missing file means
nobody is trusted — every submission and decision is refused — which is logged, loudly.  A
file that is there but does not load (an editor mid-save, a typo) never takes effect: the last
version that loaded keeps serving, and the reason is logged once per bad version.  A client
signs with its own key (`signer_of`): ``CALLGATE_SIGNING_KEY`` if set, else the local keyring's
key of that name.
"""

from __future__ import annotations

import logging

from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import read_private_key
from callgate.auth.tokens import Signer
from callgate.auth.trust import TrustConfig, load_trust
from callgate.config import Settings
from callgate.errors import TrustConfigError
from callgate.logs import log_fields

log = logging.getLogger("callgate.auth")

Stamp = tuple[int, int, int]
"""What tells one version of the file from the next: modification time (ns), size, inode."""
MISSING: Stamp = (0, -1, 0)


class TrustSource:
    """The trust file, read again whenever it changes on disk.  Loaded at construction, so a
    process that cannot load it fails at start-up (`TrustConfigError`), not at a decision;
    after that a version that does not load — or a file that vanished (write ``{}`` to trust
    nobody) — leaves the last one that did in force."""

    def __init__(self, settings: Settings) -> None:
        self._path = settings.trust_path
        self._stamp = self._stamp_now()
        self._trust = trust_of(settings)
        self._refused: Stamp | None = None
        """The version last refused, logged once."""

    def _stamp_now(self) -> Stamp:
        try:
            found = self._path.stat()
        except OSError:
            return MISSING
        return found.st_mtime_ns, found.st_size, found.st_ino

    def current(self) -> TrustConfig:
        """The trust in force: the file as it is now, or the last version of it that loaded."""
        stamp = self._stamp_now()
        if stamp in (self._stamp, self._refused):
            return self._trust
        try:
            if stamp == MISSING:
                raise TrustConfigError(f"trust file {self._path} is gone")
            trust = load_trust(self._path)
        except TrustConfigError as exc:
            # Refuse this version for good only if it is still the one read: a save that
            # lands mid-read is read again at the next call.
            if self._stamp_now() == stamp:
                self._refused = stamp
                log.error(
                    "the trust file does not load: the last version that did stays in "
                    "force until it is fixed (`callgate doctor` checks it)",
                    extra=log_fields(trust_file=str(self._path), reason=str(exc)),
                )
            return self._trust
        self._trust, self._stamp = trust, stamp
        return trust


def trust_of(settings: Settings) -> TrustConfig:
    """The deployment's trust configuration; an empty one (trusting nobody) if there is none."""
    path = settings.trust_path
    if not path.exists():
        log.warning(
            "no trust file: every submission and decision will be refused",
            extra=log_fields(trust_file=str(path)),
        )
        return TrustConfig()
    return load_trust(path)


def signer_of(settings: Settings, name: str | None = None) -> Signer:
    """The key this process signs with: its own (``CALLGATE_SUBMITTER``, from
    ``CALLGATE_SIGNING_KEY`` when set: a service's key, or the Slack bot's delegate key in a
    deployment) when ``name`` is None or that name, else ``name``'s in the local keyring.
    `KeyFileError` says what to do when it is missing."""
    if name in (None, settings.submitter) and settings.signing_key is not None:
        return Signer(settings.submitter, read_private_key(settings.signing_key))
    return LocalKeyring(settings.home).signer(name or settings.submitter)
