"""`callgate status | view | trace | runs | dead-letters`: read what a deployment holds.

    callgate status RUN_ID [--json]        the run record
    callgate view RUN_ID [--json]          the run and every call
    callgate trace RUN_ID [--json] [--full]   the event log, with wall-clock times
    callgate runs [--status S] [--since T] [--limit N] [--json]
    callgate dead-letters [--limit N] [--full] [--json]

Tables for people by default, ``--json`` for scripts (stdout either way).  Every read goes
through the ledger's reads (`callgate.ledger.reads`); nothing here writes.  A run that does not
exist is one line and exit 3, whichever command asked.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console, RenderableType

from callgate.client import CallgateClient
from callgate.errors import NotFoundError
from callgate.ledger.reads import Reads
from callgate.ops.exits import OK, with_client
from callgate.ops.inspect_render import (
    dead_letter_row,
    dead_letters_table,
    run_row,
    runs_table,
    status_table,
    view_renderable,
)
from callgate.ops.trace import as_json, render
from callgate.records import RunRecord
from callgate.states import RunState

SCAN_PAGE = 200
"""Runs index entries read per round trip while ``runs`` looks for ones to show."""
_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_SPAN_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def dump(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def show(renderable: RenderableType) -> None:
    """Print for a person; wide when piped, so an id is never folded mid-way."""
    console = Console(file=sys.stdout, soft_wrap=False)
    if not console.is_terminal:
        console = Console(file=sys.stdout, width=200, soft_wrap=False)
    console.print(renderable)


def since(text: str) -> int:
    """``--since``: a span back from now (``90s``, ``15m``, ``2h``, ``7d``) or an ISO-8601
    time (UTC unless it says otherwise), as epoch milliseconds."""
    span = _SPAN.match(text.strip())
    if span:
        return int((time.time() - float(span[1]) * _SPAN_S[span[2]]) * 1000)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a span like 15m, 2h, 7d nor an ISO-8601 time"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def statuses(text: str) -> frozenset[RunState]:
    """``--status``: one or more run states, comma-separated."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in RunState.__members__.values()]
    if unknown or not names:
        known = ", ".join(s.value for s in RunState)
        raise argparse.ArgumentTypeError(f"unknown status {', '.join(unknown)!r} (one of {known})")
    return frozenset(RunState(s) for s in names)


async def _show_run(
    args: argparse.Namespace,
    read: Callable[[CallgateClient, str], Awaitable[dict[str, Any]]],
    renderable: Callable[[dict[str, Any]], RenderableType],
) -> int:
    """Read ``args.run_id`` with ``read``; print it as JSON or as ``renderable`` makes it."""

    async def act(client: CallgateClient) -> int:
        found = await read(client, args.run_id)
        dump(found) if args.json else show(renderable(found))
        return OK

    return await with_client(act)


async def cmd_status(args: argparse.Namespace) -> int:
    return await _show_run(args, CallgateClient.status, status_table)


async def cmd_view(args: argparse.Namespace) -> int:
    return await _show_run(args, CallgateClient.view, view_renderable)


async def cmd_trace(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        events = await client.events(args.run_id)
        if not events and await client.run(args.run_id) is None:
            raise NotFoundError(f"no run {args.run_id}")
        if args.json:
            dump(as_json(events))
        else:
            print(render(events, clock=True, full=args.full))
        return OK

    return await with_client(act)


async def find_runs(
    reads: Reads,
    partitions: int,
    since_ms: int,
    wanted: frozenset[RunState] | None,
    limit: int,
    tenant: str | None = None,
) -> list[RunRecord]:
    """Up to ``limit`` runs created since ``since_ms`` in ``wanted`` states, newest first;
    with ``tenant``, from that tenant's own index (all its login may read)."""
    found: list[RunRecord] = []
    for partition in range(partitions):
        mine: list[RunRecord] = []
        offset = 0
        while len(mine) < limit:
            page = await reads.runs_since(partition, since_ms, offset, SCAN_PAGE, tenant)
            if not page:
                break
            offset += len(page)
            records = await reads.get_runs([run_id for run_id, _ in page])
            mine += [r for r in records if r is not None and (wanted is None or r.status in wanted)]
        found += mine[:limit]
    return sorted(found, key=lambda r: r.created_ms, reverse=True)[:limit]


async def cmd_runs(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        runs = await find_runs(
            client.ledger,
            client.settings.partitions,
            args.since,
            args.status,
            args.limit,
            client.settings.tenant,
        )
        rows = [run_row(run) for run in runs]
        dump(rows) if args.json else show(runs_table(rows))
        return OK

    return await with_client(act)


async def cmd_dead_letters(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        rows = [
            dead_letter_row(partition, entry_id, fields)
            for partition in range(client.settings.partitions)
            for entry_id, fields in await client.ledger.dead_letters(partition, args.limit)
        ]
        rows = sorted(rows, key=lambda r: (r["t_ms"], r["id"]), reverse=True)[: args.limit]
        dump(rows) if args.json else show(dead_letters_table(rows, full=args.full))
        return OK

    return await with_client(act)


def _positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ 1")
    return value


def add_command(sub: Any) -> None:
    """``status``, ``view``, ``trace``, ``runs`` and ``dead-letters``."""
    for name, handler, text in (
        ("status", cmd_status, "the run record"),
        ("view", cmd_view, "the run and its calls"),
        ("trace", cmd_trace, "the run's event log, with wall-clock times"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("run_id", help="the run's id")
        cmd.add_argument("--json", action="store_true", help="print JSON instead of a table")
        if name == "trace":
            cmd.add_argument("--full", action="store_true", help="cut no detail")
        cmd.set_defaults(handler=handler)
    runs = sub.add_parser("runs", help="list runs, newest first", description="list runs")
    runs.add_argument(
        "--status",
        type=statuses,
        metavar="S[,S…]",
        help="only runs in these states, e.g. paused_approval,failed",
    )
    runs.add_argument(
        "--since",
        type=since,
        default=0,
        metavar="T",
        help="only runs created since T: a span (15m, 2h, 7d) or an ISO-8601 time",
    )
    runs.add_argument(
        "--limit", type=_positive, default=50, metavar="N", help="at most N runs (default: 50)"
    )
    runs.add_argument("--json", action="store_true", help="print JSON instead of a table")
    runs.set_defaults(handler=cmd_runs)
    dead = sub.add_parser(
        "dead-letters",
        help="what the workers dead-lettered, and why",
        description="stream messages no worker could settle, newest first",
    )
    dead.add_argument(
        "--limit",
        type=_positive,
        default=50,
        metavar="N",
        help="at most N per partition and in all (default: 50)",
    )
    dead.add_argument("--full", action="store_true", help="cut no reason")
    dead.add_argument("--json", action="store_true", help="print JSON instead of a table")
    dead.set_defaults(handler=cmd_dead_letters)
