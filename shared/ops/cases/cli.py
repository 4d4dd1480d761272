"""``callgate cases``: a user's own runs as regression cases.

    callgate cases export RUN_ID [--out DIR] [--name NAME]
    callgate cases run PATH [--api API] [--live-reads] [--tools M1,M2] [--json]

``export`` writes one redacted case file (``DIR/NAME.json``) from a paused or finished run of
the deployment ``REDIS_URL`` points at.  ``run`` replays every case in PATH (a file or a
folder) through a fresh local deployment of the same tools (``--tools``, else
``CALLGATE_TOOL_MODULES``): recorded model turns from the scripted model server, recorded read
results (the live tools with ``--live-reads``), writes to a counting stub only, the recorded
people's decisions; and prints what differs.  Exit codes: 0 every case replayed the same (or
the case was written); 1 a case differs, or the replay could not run; 2 a bad flag or case
file; 3 no such run, or it is still moving; 5 Redis did not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import orjson

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.cases.casefile import Case, CaseFileError, load_cases, save_case
from callgate.ops.cases.export import NotSettledError, export_case
from callgate.ops.cases.replay import Replay, Verdict, replay_cases, replay_spec
from callgate.ops.cases.report import render, to_json
from callgate.ops.conformance.cli import positive
from callgate.ops.exits import CONFLICT, ENDED, OK, USAGE, with_client
from callgate.ops.run_options import APIS
from callgate.ops.stack import progress_to_stderr, sigterm_as_interrupt
from callgate.ops.system import START_ERRORS, LocalSystem
from callgate.tools.registry import RegistryError, load_registry


def add_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = subparsers.add_parser("cases", help="export runs as regression cases; replay them")
    verbs = cmd.add_subparsers(dest="verb", required=True)
    out = verbs.add_parser("export", help="write a paused or finished run as a case file")
    out.add_argument("run_id")
    out.add_argument("--out", type=Path, default=Path("cases"), help="folder (default: cases)")
    out.add_argument("--name", help="the case's name and file name (default: the run id)")
    out.set_defaults(handler=run_export)
    rerun = verbs.add_parser("run", help="replay case files and show what differs")
    rerun.add_argument("path", type=Path, help="a case file, or a folder of them")
    rerun.add_argument("--api", choices=APIS, help="replay on this API (default: each case's own)")
    rerun.add_argument("--live-reads", action="store_true", help="reads call the live tools")
    rerun.add_argument("--tools", help="tool modules, comma-separated (default: the settings')")
    rerun.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    rerun.add_argument(
        "--concurrency", type=positive(int), default=8, help="cases at once (default 8)"
    )
    rerun.add_argument(
        "--timeout", type=positive(float), default=60.0, help="seconds a case may take (60)"
    )
    rerun.set_defaults(handler=run_replay)


async def run_export(args: argparse.Namespace) -> int:
    settings = Settings()
    try:
        registry = load_registry(settings.tool_modules)
    except RegistryError as exc:
        progress_to_stderr(f"{exc} — set CALLGATE_TOOL_MODULES as the workers have it")
        return USAGE

    async def act(client: CallgateClient) -> int:
        try:
            case = await export_case(client, args.run_id, registry, args.name)
        except NotSettledError as exc:
            progress_to_stderr(f"{exc}")
            return CONFLICT
        path = save_case(case, args.out)
        print(f"wrote {path} ({len(case.turns)} turn(s), {len(case.calls)} call(s))")
        return OK

    return await with_client(act, settings)


def run_replay(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    try:
        cases = load_cases(args.path)
    except CaseFileError as exc:
        progress_to_stderr(f"{exc}")
        return USAGE
    modules = tuple(m for m in (args.tools or "").split(",") if m) or Settings().tool_modules
    replay = Replay(args.api, args.live_reads, args.concurrency, args.timeout)
    started = time.monotonic()
    try:
        verdicts = replay_folder(cases, modules, replay)
    except (*START_ERRORS, RegistryError) as exc:
        progress_to_stderr(f"the replay could not run: {exc}")
        return ENDED
    elapsed_s = time.monotonic() - started
    if args.json:
        sys.stdout.write(orjson.dumps(to_json(verdicts), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(render(verdicts, elapsed_s))
    return OK if all(v.cell.passed for v in verdicts) else ENDED


def replay_folder(
    cases: list[Case], tool_modules: tuple[str, ...], replay: Replay
) -> list[Verdict]:
    """Start a replaying system, replay ``cases`` on it, stop it."""
    load_registry(tool_modules)  # a module that does not import is one line, before any start
    with tempfile.TemporaryDirectory(prefix="callgate-cases-") as scratch:
        folder = Path(scratch)
        system = LocalSystem(replay_spec(folder, tool_modules, replay), progress=progress_to_stderr)
        system.start()
        try:
            return asyncio.run(_replay(system, folder, cases, replay))
        finally:
            system.stop()


async def _replay(
    system: LocalSystem, folder: Path, cases: list[Case], replay: Replay
) -> list[Verdict]:
    async with CallgateClient(system.settings) as client:
        return await replay_cases(
            client, system.urls["model"], folder, cases, replay, progress_to_stderr
        )
