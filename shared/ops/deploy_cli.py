"""`callgate deploy init DIR`: a deployment's trust file, keys and Redis passwords in one step.

    callgate deploy init DIR --service NAME [--grant ROLE ...] [--attribute KEY=VALUE ...] ...
                             [--person NAME [--role ROLE ...]] ... [--slack] [--api]
                             [--redis HOST:PORT] [--tools MODULE,...] [--force]

Each ``--grant``/``--attribute`` belongs to the ``--service`` before it, each ``--role`` to the
``--person`` before it.  Writes ``DIR/trust.json`` (submitters with their grants and
attributes, people with their roles, and with ``--slack`` / ``--api`` the delegate ``slack``
/ ``api`` signing for every person), each private key in ``DIR/secrets/NAME.pem`` (0600,
folder 0700, never printed) and ``DIR/.env`` (0600: the Redis users' passwords in hex, each
login's URL, where the bundle is, the tool modules; `callgate.ops.deploy_bundle`), then prints
the next steps (README: Deploy).  A bundle already in DIR is replaced only with ``--force``
(new keys and passwords: every copy of the old ones stops working).

Exit codes: 0 written; 1 could not write; 2 usage; 3 DIR holds a bundle already.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from callgate.auth.keys import ensure_private_dir, write_private_key, write_secret_file
from callgate.ops import exits
from callgate.ops.deploy_bundle import Bundle, Entry, build, env_text
from callgate.standins.demo import TOOL_MODULES as DEMO_TOOL_MODULES

BUNDLE_FILES = ("trust.json", ".env", "secrets")
WORKER_NAMES = "ingress model_turn validator executor reconciler"


class DeployError(Exception):
    """One line for the terminal, and the exit code it ends with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Start(argparse.Action):
    """``--service NAME`` / ``--person NAME``: an entry the options after it add to."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        entries = list(getattr(namespace, "entries", None) or [])
        entries.append(Entry(kind=self.const, name=str(values)))
        namespace.entries = entries


class _Detail(argparse.Action):
    """``--grant``/``--attribute`` (a service's), ``--role`` (a person's): for the entry
    named last, which must be of the right kind."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        entries: list[Entry] = getattr(namespace, "entries", None) or []
        owner = "--service" if self.const == "submitter" else "--person"
        if not entries or entries[-1].kind != self.const:
            parser.error(f"{option_string} {values} needs a {owner} NAME before it")
        getattr(entries[-1], self.dest).append(str(values))


def _write(directory: Path, bundle: Bundle, env: str, force: bool) -> None:
    """Keys first, then the trust file that lists them, then ``.env``."""
    existing = [name for name in BUNDLE_FILES if (directory / name).exists()]
    if existing and not force:
        raise DeployError(
            f"{directory} holds a deployment already ({', '.join(existing)}): "
            "choose another DIR, or pass --force to replace it (new keys and "
            "passwords; every copy of the old ones stops working)",
            exits.CONFLICT,
        )
    ensure_private_dir(directory)
    for stale in (directory / "secrets").glob("*.pem"):  # --force: the old bundle's keys go
        if stale.stem not in bundle.keys:
            stale.unlink()
    for name, key in bundle.keys.items():
        write_private_key(directory / "secrets" / f"{name}.pem", key, overwrite=force)
    trust_file = directory / "trust.json"
    write_secret_file(
        trust_file, (json.dumps(bundle.trust, indent=2) + "\n").encode(), overwrite=True
    )
    os.chmod(trust_file, 0o644)  # public keys only: any worker's user may read it
    write_secret_file(directory / ".env", env.encode(), overwrite=True)


def next_steps(directory: Path, bundle: Bundle, submitter: str) -> list[str]:
    """What to do with the bundle, in README's Deploy order."""
    people = sorted(bundle.trust["people"])
    env = directory / ".env"
    counts = ", ".join(f"{len(entries)} {section}" for section, entries in bundle.trust.items())
    steps = [
        f"wrote {directory}: trust.json ({counts}), secrets/ ({', '.join(sorted(bundle.keys))}),"
        " .env (Redis passwords)",
        "next (README: Deploy):",
        f"  1. Redis, locked down:  docker compose --env-file {env} up -d redis",
        f"     or: set -a; . {env}; set +a; sh deploy/redis/acl.sh deploy/redis/users.acl"
        f" > {directory}/users.acl; redis-server deploy/redis/redis.conf --aclfile"
        f" {directory}/users.acl --dir {directory}",
        f"  2. the workers:  docker compose --env-file {env} up -d",
        f"     or: honcho -e {env} start {WORKER_NAMES}",
        f"  3. submit as {submitter}: REDIS_URL=$SUBMITTERS_REDIS_URL callgate run … "
        f"(CALLGATE_SUBMITTER={submitter}, CALLGATE_SIGNING_KEY in .env)",
    ]
    for person in people:
        steps.append(
            f"  4. give {person} secrets/{person}.pem (their ~/.callgate/keys/"
            f"{person}.pem); they approve with REDIS_URL=$APPROVERS_REDIS_URL "
            f"callgate approve ID --as {person}"
        )
    steps.append("  5. check it: callgate doctor (with the .env's variables set)")
    return steps


def cmd_init(args: argparse.Namespace) -> int:
    entries: list[Entry] = args.entries or []
    directory = Path(args.dir).expanduser().resolve()
    tools = [m.strip() for m in args.tools.split(",") if m.strip()]
    try:
        bundle = build(entries, args.slack, args.api)
    except ValueError as exc:
        raise DeployError(exits.one_line(str(exc)), exits.USAGE) from None
    submitter = next(entry.name for entry in entries if entry.kind == "submitter")
    _write(directory, bundle, env_text(bundle, directory, args.redis, tools, submitter), args.force)
    for line in next_steps(directory, bundle, submitter):
        print(line)
    return exits.OK


def run(args: argparse.Namespace) -> int:
    """`deploy init`; every failure is one line and a documented exit code."""
    try:
        code: int = args.deploy_handler(args)
    except DeployError as exc:
        print(f"callgate deploy: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"callgate deploy: cannot write the bundle{where}: {exc.strerror or exc}; check "
            "the folder and its permissions",
            file=sys.stderr,
        )
        return exits.ENDED
    return code


def add_command(sub: Any) -> None:
    deploy = sub.add_parser("deploy", help="make a deployment's trust file, keys and passwords")
    deploy.set_defaults(handler=run)
    actions = deploy.add_subparsers(dest="deploy_command", metavar="{init}", required=True)
    init = actions.add_parser(
        "init",
        help="write DIR/trust.json, DIR/secrets/, DIR/.env",
        description=__doc__.split("\n\n")[2],
        epilog="exit codes: 0 written; 1 could not write; 2 usage; 3 DIR holds a bundle already",
    )
    init.add_argument("dir", metavar="DIR", help="where the bundle goes (made 0700)")
    _add_entries(init)
    init.add_argument(
        "--slack",
        action="store_true",
        help="the Slack bot's delegate key, signing for every person",
    )
    init.add_argument(
        "--api",
        action="store_true",
        help="the HTTP API's delegate key (`callgate serve`), signing for every person",
    )
    init.add_argument(
        "--redis",
        default="127.0.0.1:6379",
        metavar="HOST:PORT",
        help="where Redis listens, for the logins' URLs (default: %(default)s)",
    )
    init.add_argument(
        "--tools",
        default=",".join(DEMO_TOOL_MODULES),
        metavar="MODULES",
        help="the tool modules every worker imports (default: the demo's)",
    )
    init.add_argument("--force", action="store_true", help="replace a bundle in DIR")
    init.set_defaults(deploy_handler=cmd_init, entries=None)


def _add_entries(init: argparse.ArgumentParser) -> None:
    """``--service``/``--person`` and the options that belong to the one before them."""
    init.add_argument(
        "--service",
        action=_Start,
        const="submitter",
        dest="entries",
        metavar="NAME",
        help="a service that submits runs (repeat for more)",
    )
    init.add_argument(
        "--grant",
        action=_Detail,
        const="submitter",
        metavar="ROLE",
        help="a role that service may put into an identity ('*': any)",
    )
    init.add_argument(
        "--attribute",
        action=_Detail,
        const="submitter",
        metavar="KEY=VALUE",
        help="an identity field that service may assert, e.g. tenant=acme",
    )
    init.add_argument(
        "--person",
        action=_Start,
        const="person",
        dest="entries",
        metavar="NAME",
        help="a person who approves or resolves (repeat)",
    )
    init.add_argument(
        "--role", action=_Detail, const="person", metavar="ROLE", help="a role of that person"
    )
