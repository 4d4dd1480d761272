"""`callgate doctor`: what this machine's deployment settings would do, checked the way the
workers read them, one line per check: ``ok`` or ``BAD`` and what to do.

    callgate doctor [--no-redis]

* the trust file loads exactly as a worker loads it: a file a worker would refuse (not JSON,
  an editor's half-written save, a key that does not parse) is named with the reason, while
  the workers keep the last version that loaded (`callgate.auth.deployment.TrustSource`);
* every key on this machine — the submitter's (``CALLGATE_SUBMITTER`` +
  ``CALLGATE_SIGNING_KEY``), the local keyring's, the bundle's (``CALLGATE_DEPLOY_DIR/secrets``)
  — is the one the trust file lists under its name;
* the tool modules (``CALLGATE_TOOL_MODULES``) import, as every worker imports them;
* and unless ``--no-redis`` (`callgate.ops.doctor_checks`): each Redis login this machine has
  works and its ACL does what README's Security table says, Redis refuses a client with no
  user, every worker kind has a live consumer, the clocks agree, and no call of a live run is
  stranded: one ``BAD stranded call RUN/CALL: TOOL STATE for N s …`` line for each call past
  its timeouts in a state only a worker moves it on from (`callgate.ops.stranded`; a call
  waiting for a person's approval or resolution is not one).

With the bundle's ``.env`` in the environment (``set -a; . DIR/.env; set +a``) it checks the
whole deployment.  Exit codes: 0 every check passed, 1 one failed (a stranded call is a
failed check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from callgate.auth.entries import SECTIONS
from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import public_key_text, read_private_key
from callgate.auth.trust import TrustConfig, load_trust
from callgate.config import Settings
from callgate.errors import KeyFileError, TrustConfigError
from callgate.keys import Keys
from callgate.ops import exits
from callgate.ops.doctor_checks import (
    Check,
    check_clock,
    check_login,
    check_no_anonymous,
    check_stranded,
    check_workers,
    guarded,
)
from callgate.tools.registry import RegistryError, load_registry


class LoginSettings(BaseSettings):
    """The other Redis logins a deployment's ``.env`` names (`callgate deploy init`); the
    workers' is ``REDIS_URL``."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore")

    submitters_redis_url: str | None = None
    approvers_redis_url: str | None = None
    slack_redis_url: str | None = None

    def urls(self, settings: Settings) -> list[str]:
        found = [
            settings.redis_url,
            self.submitters_redis_url,
            self.approvers_redis_url,
            self.slack_redis_url,
        ]
        return list(dict.fromkeys(url for url in found if url))


def check_trust(settings: Settings) -> tuple[Check, TrustConfig | None]:
    """Whether the trust file loads, the line that says so, and what it holds."""
    path = settings.trust_path
    if not path.exists():
        return (
            False,
            f"no trust file at {path}: every submission and decision is refused "
            "(create it with `callgate deploy init`, or set CALLGATE_TRUST_FILE)",
        ), None
    try:
        trust = load_trust(path)
    except TrustConfigError as exc:
        return (
            False,
            f"{exits.one_line(str(exc))} — the workers keep the last version that "
            "loaded until it is fixed",
        ), None
    counts = ", ".join(
        f"{len(getattr(trust, section))} {section}"
        for section in ("submitters", "people", "delegates", "issuers")
    )
    return (True, f"trust file {path}: {counts}"), trust


def local_keys(settings: Settings) -> list[tuple[str, Path]]:
    """Every private key on this machine, by the name it signs as."""
    found = []
    if settings.signing_key is not None:
        found.append((settings.submitter, settings.signing_key))
    keyring = LocalKeyring(settings.home)
    found += [(name, keyring.key_path(name)) for name in keyring.key_names()]
    if settings.deploy_dir is not None:
        found += [(p.stem, p) for p in sorted((settings.deploy_dir / "secrets").glob("*.pem"))]
    unique = {(name, path.resolve()): (name, path) for name, path in found}
    return list(unique.values())


def check_key(trust: TrustConfig, name: str, path: Path) -> Check:
    """Whether the trust file lists ``path``'s public key under ``name``."""
    try:
        public_key = public_key_text(read_private_key(path))
    except KeyFileError as exc:
        return False, exits.one_line(str(exc))
    section = next(
        (SECTIONS[kind] for kind in SECTIONS if name in getattr(trust, SECTIONS[kind])), None
    )
    if section is None:
        return False, (
            f"key {name} ({path}) is not in the trust file: add its entry "
            f"(`callgate keys new {name} …` prints one; public key {public_key})"
        )
    listed = trust.public_key_of(name)
    if listed is None or public_key_text(listed) != public_key:
        return False, (
            f"key {name} ({path}) is not the key the trust file lists for {name} "
            f"(rotated?): register {public_key} under {section}.{name}"
        )
    return True, f"key {name} ({path}) is the trust file's {section}.{name}"


def check_tools(settings: Settings) -> Check:
    """Whether the tool modules import, as each worker imports them at start."""
    modules = settings.tool_modules
    if not modules:
        return True, "no tool modules (CALLGATE_TOOL_MODULES): runs may use no tool"
    try:
        registry = load_registry(modules)
    except RegistryError as exc:
        return False, (
            f"{exits.one_line(str(exc))} — install the package that holds it where "
            "the workers run (deploy/Dockerfile: CALLGATE_EXTRA_PACKAGES)"
        )
    return True, f"tool modules import: {', '.join(registry.names())}"


async def redis_checks(settings: Settings) -> list[Check]:
    keys = Keys(settings.key_prefix, settings.partitions)
    urls = LoginSettings().urls(settings)
    lines = [line for url in urls for line in await guarded(check_login(url, keys), "login")]
    if any("@" in url for url in urls):  # a locked-down deployment: nobody gets in without
        lines += await guarded(check_no_anonymous(settings.redis_url), "anonymous client")
    lines += await guarded(check_workers(settings), "workers")
    lines += await guarded(check_clock(settings), "clock")
    lines += await guarded(check_stranded(settings), "stranded calls")
    return lines


async def cmd_doctor(args: argparse.Namespace) -> int:
    settings = Settings()
    trust_line, trust = check_trust(settings)
    checks = [trust_line]
    if trust is not None:
        keys = local_keys(settings)
        checks += [check_key(trust, name, path) for name, path in keys] or [
            (True, "no local keys to check (this machine signs nothing)")
        ]
    checks.append(check_tools(settings))
    if not args.no_redis:
        checks += await redis_checks(settings)
    for ok, line in checks:
        print(f"{'ok ' if ok else 'BAD'} {line}", file=sys.stdout if ok else sys.stderr)
    return exits.OK if all(ok for ok, _ in checks) else exits.ENDED


def add_command(sub: Any) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check this machine's deployment: trust file, keys, "
        "tools, Redis logins, workers, clock, stranded calls",
    )
    doctor.add_argument(
        "--no-redis", action="store_true", help="check the trust file, keys and tools only"
    )
    doctor.set_defaults(handler=cmd_doctor)
