"""What `callgate deploy init` writes, built before anything touches the disk.

A bundle is a trust file (submitters, people, the Slack delegate), one private key per entry,
and the ``.env`` that docker-compose.yml, the Procfile (``honcho -e DIR/.env start``),
deploy/redis/acl.sh and the CLI read: every Redis user's password (hex, so it goes into a URL
as it is), the URL each login connects with, where the bundle is, and the tool modules.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.entries import SECTIONS, Kind, make_entry, parse_attributes
from callgate.auth.keyring import LocalKeyring
from callgate.auth.keys import new_private_key, public_key_text
from callgate.auth.trust import ANY, trust_from_document
from callgate.errors import TrustConfigError
from callgate.keys import TENANT_PATTERN

LOGINS = ("workers", "submitters", "approvers", "slack", "api")
"""The Redis users of deploy/redis/users.acl (tenants add ``submitters_T``, ``approvers_T``)."""
SLACK = "slack"
"""The Slack bot's key id (`callgate.slack.settings.SlackSettings.key_id`'s default)."""
API = "api"
"""The HTTP API's delegate key id (`callgate.api.settings.ApiSettings.delegate`'s default)."""
KEY_PREFIX = "cg"
"""The key prefix users.acl is written for."""
_TENANT = re.compile(TENANT_PATTERN)


@dataclass
class Entry:
    """One ``--service`` or ``--person`` of the command line, with the options after it."""

    kind: Kind
    name: str
    grant: list[str] = field(default_factory=list)
    attribute: list[str] = field(default_factory=list)
    role: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Bundle:
    """Everything `deploy init` writes: the trust document, the keys, the ``.env`` lines."""

    trust: dict[str, Any]
    keys: dict[str, Ed25519PrivateKey]
    passwords: dict[str, str]
    tenants: tuple[str, ...]


def password_variable(login: str) -> str:
    """``REDIS_<LOGIN>_PASSWORD``: where acl.sh and docker-compose.yml read it."""
    return f"REDIS_{login.upper()}_PASSWORD"


def _tenants(entries: Sequence[Entry]) -> tuple[str, ...]:
    """The tenants the services may assert: each gets its own Redis logins."""
    found: list[str] = []
    for entry in entries:
        for value in parse_attributes(entry.attribute).get("tenant", []):
            if value == ANY:
                continue
            if not _TENANT.fullmatch(value):
                raise ValueError(
                    f"tenant {value!r}: tenant names are lower case letters, "
                    "digits and _, starting with a letter, at most 32"
                )
            found.append(value)
    return tuple(dict.fromkeys(found))


def build(entries: Sequence[Entry], slack: bool, api: bool = False) -> Bundle:
    """The bundle for ``entries`` (and the Slack and HTTP API delegates); ValueError says what
    is wrong."""
    if not any(entry.kind == "submitter" for entry in entries):
        raise ValueError("name at least one submitting service: --service NAME [--grant ROLE]")
    delegates = [name for name, wanted in ((SLACK, slack), (API, api)) if wanted]
    names = [entry.name for entry in entries] + delegates
    if len(set(names)) != len(names):
        raise ValueError(
            f"each name once: {', '.join(sorted({n for n in names if names.count(n) > 1}))}"
        )
    for name in names:
        LocalKeyring(Path()).key_path(name)  # a key name is a file name: ValueError if unsafe
    keys = {name: new_private_key() for name in names}
    trust: dict[str, Any] = {section: {} for section in SECTIONS.values()}
    people = [entry.name for entry in entries if entry.kind == "person"]
    for entry in entries:
        fields = {
            "grants": entry.grant,
            "roles": entry.role,
            "attributes": parse_attributes(entry.attribute),
        }
        trust[SECTIONS[entry.kind]][entry.name] = make_entry(
            entry.kind, public_key_text(keys[entry.name]), fields
        )
    for name in delegates:
        trust["delegates"][name] = make_entry(
            "delegate", public_key_text(keys[name]), {"signs_for": people or [ANY]}
        )
    try:
        trust_from_document(trust, path=Path("trust.json"))
    except TrustConfigError as exc:
        raise ValueError(str(exc)) from None
    tenants = _tenants(entries)
    logins = [*LOGINS, *(f"{base}_{t}" for t in tenants for base in ("submitters", "approvers"))]
    passwords = {login: secrets.token_hex(32) for login in logins}
    return Bundle(trust, keys, passwords, tenants)


def env_text(
    bundle: Bundle, directory: Path, redis_address: str, tools: Sequence[str], submitter: str
) -> str:
    """The ``.env``: every variable with a comment (.env.example documents the same)."""

    def url(login: str) -> str:
        return f"redis://{login}:{bundle.passwords[login]}@{redis_address}/0"

    lines = [
        "# Made by `callgate deploy init`: this deployment's secrets (0600; never commit it).",
        "# Read by `honcho -e THIS_FILE start` (the Procfile), `docker compose --env-file",
        "# THIS_FILE up`, deploy/redis/acl.sh and the CLI (`set -a; . THIS_FILE; set +a`).",
        "",
        "# The Redis users' passwords (deploy/redis/users.acl); acl.sh stores only their SHA-256.",
        *(f"{password_variable(login)}={pw}" for login, pw in bundle.passwords.items()),
        "# Tenants: acl.sh renders submitters_<tenant> / approvers_<tenant> for each (empty: one).",
        f"CALLGATE_TENANTS={','.join(bundle.tenants)}",
        "",
        "# Each login's URL (Redis at " + redis_address + "; docker-compose.yml builds its own).",
        "# REDIS_URL is the workers' (every Procfile process); the others are for the CLI,",
        "# other services (submitters), people (approvers) and the Slack bot.",
        f"REDIS_URL={url('workers')}",
        *(f"{login.upper()}_REDIS_URL={url(login)}" for login in LOGINS[1:]),
        "CALLGATE_KEY_PREFIX=" + KEY_PREFIX,
        "",
        "# The bundle: docker-compose.yml mounts its trust file and keys as secrets.",
        f"CALLGATE_DEPLOY_DIR={directory}",
        f"CALLGATE_TRUST_FILE={directory / 'trust.json'}",
        "# The submitting service of this host's CLI (`callgate run`) and its key.",
        f"CALLGATE_SUBMITTER={submitter}",
        f"CALLGATE_SIGNING_KEY={directory / 'secrets' / f'{submitter}.pem'}",
        "",
        "# The tool registry every worker imports (your own package's modules).",
        f"CALLGATE_TOOL_MODULES={','.join(tools)}",
    ]
    return "\n".join(lines) + "\n"
