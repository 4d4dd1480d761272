"""`callgate keys new` / `keys list`: a signing key, and what the deployment registers for it.

    callgate keys new NAME [--role ROLE ...] [--force] [--json]          # a person
    callgate keys new NAME --submitter [--grant ROLE ...] [--attribute KEY=VALUE ...]
    callgate keys new NAME --delegate --signs-for PERSON [--signs-for PERSON ...]
    callgate keys list [--json]
    callgate keys token NAME [--ttl SECONDS]

`token` prints a short-lived bearer token for the HTTP API (`callgate serve`), signed with
NAME's key here: the API takes it for NAME as the trust file lists them (a submitter or a
person), never for more.

The key lives in the local keyring (``$CALLGATE_HOME/keys/NAME.pem``, default ``~/.callgate``,
mode 0600).  A key counts only once the deployment lists its public key for NAME in the trust
file, so `new` leaves every trust file alone and prints, on stdout, exactly what to register:
the public key (``ed25519:…``) and the one-line entry for the trust file's ``people`` (a
person, the default), ``submitters`` (a service that submits runs, with the roles it may grant
and the identity fields it may assert, e.g. ``--attribute tenant=acme``) or ``delegates`` (a
service such as the Slack bot that signs for the people it authenticated).  `list` shows names
and public keys, never private material.

Exit codes: 0 done; 1 the keyring cannot be read or written; 2 usage (a name, role or option
that cannot be used); 3 conflict (NAME already has a key: an existing key is replaced only with
``--force``, because replacing it silently locks its owner out of every trust file that lists
the old one).  Every error is one line on stderr saying what to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from callgate.auth.entries import SECTIONS, Kind, entry_line, make_entry, parse_attributes
from callgate.auth.keyring import LocalKeyring, default_home
from callgate.auth.keys import new_private_key, public_key_text, read_private_key
from callgate.auth.tokens import ACCESS_MAX_LIFETIME_S, ACCESS_TTL_S, sign_access
from callgate.errors import KeyFileError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3


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


def kind_and_fields(args: argparse.Namespace) -> tuple[Kind, dict[str, Any]]:
    """Which kind of key the flags ask for, and its entry's fields; a flag of another kind is
    a usage error rather than something silently left out of the entry."""
    kind: Kind = "submitter" if args.submitter else "delegate" if args.delegate else "person"
    given = {
        "submitter": bool(args.grant or args.attribute),
        "person": bool(args.role),
        "delegate": bool(args.signs_for),
    }
    flags = {"submitter": "--grant/--attribute", "person": "--role", "delegate": "--signs-for"}
    for other, used in given.items():
        if used and other != kind:
            raise KeysCommandError(
                f"{flags[other]} is for a {other}'s key, not a {kind}'s "
                f"(see `callgate keys new --help`)",
                EXIT_USAGE,
            )
    try:
        fields: dict[str, Any] = {
            "grants": args.grant or [],
            "roles": args.role or [],
            "signs_for": args.signs_for or [],
            "attributes": parse_attributes(args.attribute or []),
        }
        make_entry(kind, public_key_text(new_private_key()), fields)  # checked before any key
    except ValueError as exc:
        raise KeysCommandError(str(exc), EXIT_USAGE) from None
    return kind, fields


def make_key(
    keyring: LocalKeyring, name: str, kind: Kind, fields: dict[str, Any], force: bool
) -> dict[str, Any]:
    """Make ``name``'s key; what the deployment must register, and the key it replaced."""
    try:
        path = keyring.key_path(name)
    except ValueError as exc:
        raise KeysCommandError(str(exc), EXIT_USAGE) from None
    replaced = _public_key_of(keyring, name) if path.exists() else None
    try:
        path, public_key = keyring.new_key(name, overwrite=force)
    except FileExistsError:
        raise KeysCommandError(
            f"{name} already has a key ({path}, public key {_public_key_of(keyring, name)}): "
            "register that one, or pass --force to replace it (every trust file listing the "
            "old key must then be updated)",
            EXIT_CONFLICT,
        ) from None
    entry = make_entry(kind, public_key, fields)
    section = SECTIONS[kind]
    return {
        "name": name,
        "kind": kind,
        "section": section,
        "key_file": str(path),
        "public_key": public_key,
        "trust_entry": entry_line(name, entry),
        section: {name: entry},
        "replaced": replaced,
    }


def cmd_new(args: argparse.Namespace) -> int:
    """Print the public key and the trust entry on stdout; the advice goes to stderr."""
    keyring = LocalKeyring(default_home())
    kind, fields = kind_and_fields(args)
    made = make_key(keyring, args.name, kind, fields, args.force)
    if args.json:
        print(json.dumps(made))
    else:
        print(made["public_key"])
        print(made["trust_entry"])
    if made["replaced"] is not None:
        print(
            f"replaced {made['name']}'s key; the old public key {made['replaced']} no longer "
            "signs for them: update every trust file that lists it",
            file=sys.stderr,
        )
    where = (
        "give its service CALLGATE_SUBMITTER=" + made["name"] + " and CALLGATE_SIGNING_KEY="
        f"{made['key_file']}. "
        if kind == "submitter"
        else ""
    )
    print(
        f"made {made['key_file']} (0600). {where}To trust it, add the entry above to "
        f"\"{made['section']}\" in the deployment's trust file (this machine's: "
        f"{keyring.trust_file}).",
        file=sys.stderr,
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Names and public keys, never a private key's bytes."""
    keyring = LocalKeyring(default_home())
    listed = [
        {"name": name, "public_key": _public_key_of(keyring, name)} for name in keyring.key_names()
    ]
    if args.json:
        print(json.dumps(listed))
    elif not listed:
        print(
            f"no keys in {keyring.keys_dir}: make one with `callgate keys new NAME`",
            file=sys.stderr,
        )
    else:
        width = max(len(item["name"]) for item in listed)
        for item in listed:
            print(f"{item['name']:<{width}}  {item['public_key']}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    """One bearer token on stdout, for ``Authorization: Bearer …``."""
    if not 0 < args.ttl <= ACCESS_MAX_LIFETIME_S:
        raise KeysCommandError(
            f"--ttl must be in (0, {ACCESS_MAX_LIFETIME_S:.0f}] seconds", EXIT_USAGE
        )
    try:
        signer = LocalKeyring(default_home()).signer(args.name)
    except ValueError as exc:
        raise KeysCommandError(str(exc), EXIT_USAGE) from None
    print(sign_access(signer, args.ttl))
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
        print(
            f"callgate keys: cannot use the keyring{where}: {exc.strerror or exc}; check "
            "CALLGATE_HOME and its permissions",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return code


def _add_new(actions: Any) -> None:
    """`keys new`: one option per field of its trust-file entry, which it prints to register
    (a person's roles, a submitter's grants and attributes, a delegate's people)."""
    new = actions.add_parser("new", help="make NAME's key pair and print what to register")
    new.add_argument("name", help="its key id in the trust file (a person's or service's name)")
    kind = new.add_mutually_exclusive_group()
    kind.add_argument(
        "--submitter",
        action="store_true",
        help='a service that submits runs (an entry for "submitters")',
    )
    kind.add_argument(
        "--delegate",
        action="store_true",
        help='a service that signs for people, e.g. the Slack bot ("delegates")',
    )
    new.add_argument(
        "--role", action="append", metavar="ROLE", help="a person's role (repeat for more)"
    )
    new.add_argument(
        "--grant",
        action="append",
        metavar="ROLE",
        help="a role the submitter may put into an identity ('*': any)",
    )
    new.add_argument(
        "--attribute",
        action="append",
        metavar="KEY=VALUE",
        help="an identity field the submitter may assert, e.g. tenant=acme",
    )
    new.add_argument(
        "--signs-for",
        action="append",
        metavar="PERSON",
        help="a person the delegate may sign for ('*': every person)",
    )
    new.add_argument(
        "--force",
        action="store_true",
        help="replace NAME's existing key (its old public key stops working)",
    )
    new.add_argument("--json", action="store_true", help="print one JSON object")
    new.set_defaults(keys_handler=cmd_new)


def add_command(sub: Any) -> None:
    keys = sub.add_parser("keys", help="make and list signing keys in the local keyring")
    keys.set_defaults(handler=run)
    actions = keys.add_subparsers(dest="keys_command", metavar="{new,list,token}", required=True)
    _add_new(actions)
    listing = actions.add_parser("list", help="names and public keys (never private keys)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(keys_handler=cmd_list)
    token = actions.add_parser("token", help="a short-lived bearer token for the HTTP API")
    token.add_argument("name", help="whose key signs it (a submitter or a person)")
    token.add_argument(
        "--ttl",
        type=float,
        default=ACCESS_TTL_S,
        help=f"seconds it lives (default {ACCESS_TTL_S:.0f}, at most {ACCESS_MAX_LIFETIME_S:.0f})",
    )
    token.set_defaults(keys_handler=cmd_token)
