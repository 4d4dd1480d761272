"""``callgate conformance``: the regression catalogue × the three protocols, end to end.

    callgate conformance [--api A [A …]] [--case C [C …]] [--json] [--concurrency N]

Starts a whole deployment (real worker processes, Redis, the demo services, the scripted
model server through the official SDKs), runs every cell, and prints the matrix on stdout —
or, with ``--json``, ``{"cells": [{case, api, passed, expected_state, actual_state,
executions, pairing_ok, external_effect, detail}, …]}``.  Progress goes to stderr.  Exit
code: 0 when every cell passed, 1 when any did not (or the system could not start).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from callgate.errors import CallgateError
from callgate.ops.conformance.catalogue import APIS, CASES, select
from callgate.ops.conformance.report import exit_code, render, to_json
from callgate.ops.conformance.runner import Plan, cells_of, run_matrix
from callgate.ops.stack import progress_to_stderr, sigterm_as_interrupt

N = TypeVar("N", int, float)


def add_command(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "conformance", help="run the regression catalogue on every protocol, end to end"
    )
    cases = [c.id for c in CASES]
    cmd.add_argument(
        "--api",
        nargs="+",
        action="extend",
        choices=APIS,
        metavar="API",
        help=f"only these protocols (default: all): {', '.join(APIS)}",
    )
    cmd.add_argument(
        "--case",
        nargs="+",
        action="extend",
        choices=cases,
        metavar="CASE",
        help=f"only these cases (default: all): {', '.join(cases)}",
    )
    cmd.add_argument("--json", action="store_true", help="print the cells as JSON")
    cmd.add_argument(
        "--concurrency", type=positive(int), default=8, help="cells in flight at once (default 8)"
    )
    cmd.add_argument(
        "--timeout",
        type=positive(float),
        default=90.0,
        help="seconds one cell may take (default 90)",
    )
    cmd.set_defaults(handler=run)


def positive(kind: Callable[[str], N]) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    return parse


def run(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    apis = tuple(api for api in APIS if not args.api or api in args.api)
    plan = Plan(select(tuple(args.case or ())), apis, args.concurrency, args.timeout)
    progress_to_stderr(f"conformance: {len(plan.cells())} cells")
    started = time.monotonic()
    try:
        outcomes = run_matrix(plan, progress=progress_to_stderr)
    except (TimeoutError, RuntimeError, OSError, CallgateError) as exc:
        progress_to_stderr(f"conformance could not run: {exc}")
        return 1
    cells = cells_of(outcomes)
    elapsed_s = time.monotonic() - started
    if args.json:
        sys.stdout.write(orjson.dumps(to_json(cells), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render(plan.cases, plan.apis, cells, elapsed_s))
    progress_to_stderr(f"conformance: done in {elapsed_s:.1f}s")
    return exit_code(cells)
