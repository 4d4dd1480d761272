"""This deployment's trust and this process's own key, from its settings.

Workers read the trust file through a `TrustSource`, which reads it again when it changes (a
deployment that registers an approver need not restart its workers); a missing file means
nobody is trusted — every submission and decision is refused — which is logged, loudly.  A
client signs with its own key (`signer_of`): ``CALLGATE_SIGNING_KEY`` if set, else the local
keyring's key of that name.
"""

from __future__ import annotations

import logging

from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import read_private_key
from callgate.auth.tokens import Signer
from callgate.auth.trust import TrustConfig, load_trust
from callgate.config import Settings
from callgate.logs import log_fields

log = logging.getLogger("callgate.auth")


class TrustSource:
    """The trust file, read again whenever its modification time changes."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._stamp: float | None = None
        self._trust = TrustConfig()

    def current(self) -> TrustConfig:
        path = self._settings.trust_path
        try:
            stamp = path.stat().st_mtime
        except OSError:
            stamp = -1.0
        if stamp != self._stamp:
            self._trust = trust_of(self._settings)
            self._stamp = stamp
        return self._trust


def trust_of(settings: Settings) -> TrustConfig:
    """The deployment's trust configuration; an empty one (trusting nobody) if there is none."""
    path = settings.trust_path
    if not path.exists():
        log.warning("no trust file: every submission and decision will be refused",
                    extra=log_fields(trust_file=str(path)))
        return TrustConfig()
    return load_trust(path)


def signer_of(settings: Settings, name: str | None = None) -> Signer:
    """The key this process signs with: ``name``'s in the local keyring, else the submitter's
    (``CALLGATE_SIGNING_KEY`` when set).  `KeyFileError` says what to do when it is missing."""
    if name is None and settings.signing_key is not None:
        return Signer(settings.submitter, read_private_key(settings.signing_key))
    return LocalKeyring(settings.home).signer(name or settings.submitter)
