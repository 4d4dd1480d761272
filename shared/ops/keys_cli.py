"""`callgate keys new` / `keys list`: a person's signing key, and what the deployment registers.

    callgate keys new NAME [--role ROLE ...] [--force] [--json]
    callgate keys list [--json]

The key lives in the local keyring (``$CALLGATE_HOME/keys/NAME.pem``, default ``~/.callgate``,
mode 0600).  A key counts only once the deployment lists its public key for NAME in the trust
file, so `new` leaves every trust file alone and prints, on stdout, exactly what to register:
the public key (``ed25519:…``) and the one-line entry for the trust file's ``people``.  `list`
shows names and public keys, never private material.

Exit codes: 0 done; 1 the keyring cannot be read or written; 2 usage (a name or role that
cannot be used); 3 conflict (NAME already has a key: an existing key is replaced only with
``--force``, because replacing it silently locks its owner out of every trust file that lists
the old one).  Every error is one line on stderr saying what to do.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from callgate.auth.keyring import LocalKeyring, default_home
from callgate.auth.keys import public_key_text, read_private_key
from callgate.errors import KeyFileError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
_ROLE = re.compile(r"\S{1,128}")
"""A role is one word: tokens and claims carry roles space-separated."""


class KeysCommandError(Exception):
    """One line for the person at the terminal, and the exit code it ends with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _public_key_of(keyring: LocalKeyring, name: str) -> str:
    """The public key of ``name``'s private key here, or why it cannot be read."""
    try:
        return public_key_text(read_private_key(keyring.key_path(name)))
    except KeyFileError as exc:
        return f"(unreadable: {exc})"


def _checked_roles(roles: Sequence[str]) -> list[str]:
    """The roles once each, in order; a role the trust file could not carry is a usage error."""
    for role in roles:
        if not _ROLE.fullmatch(role):
            raise KeysCommandError(
                f"{role!r} is not a role: use one word without spaces, e.g. --role finance",
                EXIT_USAGE,
            )
    return list(dict.fromkeys(roles))


def make_key(keyring: LocalKeyring, name: str, roles: Sequence[str], force: bool) -> dict[str, Any]:
    """Make ``name``'s key; what the deployment must register, and the key it replaced."""
    try:
        path = keyring.key_path(name)
    except ValueError as exc:
        raise KeysCommandError(str(exc), EXIT_USAGE) from None
    checked = _checked_roles(roles)
    replaced = _public_key_of(keyring, name) if path.exists() else None
    try:
        path, snippet = keyring.new_person(name, checked, overwrite=force)
    except FileExistsError:
        raise KeysCommandError(
            f"{name} already has a key ({path}, public key {_public_key_of(keyring, name)}): "
            "register that one, or pass --force to replace it (every trust file listing the "
            "old key must then be updated)",
            EXIT_CONFLICT,
        ) from None
    entry = json.loads("{" + snippet + "}")[name]
    return {"name": name, "key_file": str(path), "public_key": entry["public_key"],
            "trust_entry": snippet, "people": {name: entry}, "replaced": replaced}


def cmd_new(args: argparse.Namespace) -> int:
    """Print the public key and the trust entry on stdout; the advice goes to stderr."""
    keyring = LocalKeyring(default_home())
    made = make_key(keyring, args.name, args.role or [], args.force)
    if args.json:
        print(json.dumps(made))
    else:
        print(made["public_key"])
        print(made["trust_entry"])
    if made["replaced"] is not None:
        print(f"replaced {made['name']}'s key; the old public key {made['replaced']} no longer "
              "signs for them: update every trust file that lists it", file=sys.stderr)
    print(f"made {made['key_file']} (0600). To trust it, add the entry above to \"people\" in "
          f"the deployment's trust file (this machine's: {keyring.trust_file}).",
          file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Names and public keys, never a private key's bytes."""
    keyring = LocalKeyring(default_home())
    listed = [{"name": name, "public_key": _public_key_of(keyring, name)}
              for name in keyring.key_names()]
    if args.json:
        print(json.dumps(listed))
    elif not listed:
        print(f"no keys in {keyring.keys_dir}: make one with `callgate keys new NAME`",
              file=sys.stderr)
    else:
        width = max(len(item["name"]) for item in listed)
        for item in listed:
            print(f"{item['name']:<{width}}  {item['public_key']}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one `keys` subcommand; every failure is one line and a documented exit code."""
    try:
        code: int = args.keys_handler(args)
    except KeysCommandError as exc:
        print(f"callgate keys: {exc}", file=sys.stderr)
        return exc.code
    except KeyFileError as exc:
        print(f"callgate keys: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"callgate keys: cannot use the keyring{where}: {exc.strerror or exc}; check "
              "CALLGATE_HOME and its permissions", file=sys.stderr)
        return EXIT_FAILED
    return code


def add_command(sub: Any) -> None:
    keys = sub.add_parser("keys", help="make and list signing keys in the local keyring")
    keys.set_defaults(handler=run)
    actions = keys.add_subparsers(dest="keys_command", metavar="{new,list}", required=True)
    new = actions.add_parser("new", help="make NAME's key pair and print what to register")
    new.add_argument("name", help="the person's name, their key id in the trust file")
    new.add_argument("--role", action="append", metavar="ROLE",
                     help="a role for the trust entry (repeat for more)")
    new.add_argument("--force", action="store_true",
                     help="replace NAME's existing key (its old public key stops working)")
    new.add_argument("--json", action="store_true", help="print one JSON object")
    new.set_defaults(keys_handler=cmd_new)
    listing = actions.add_parser("list", help="names and public keys (never private keys)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(keys_handler=cmd_list)
