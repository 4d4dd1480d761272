"""`callgate …`: submit and inspect runs, start a deployment, run the demo.

    callgate run --api openai-responses --model M --tools get_train_status,get_weather \\
        --identity '{"user": "alice"}' --input "…" | --input-file PATH | --input - \\
        [--max-turns N] [--wait] [--json] [--timeout S]   (every RunSpec field has a flag)
    callgate status RUN_ID | view RUN_ID | trace RUN_ID | runs | dead-letters
    callgate up
    callgate demo travel|workshop [--api A] [--input TEXT] [--approve-as USER]
    callgate approvals | approve ID --as USER | deny ID --as USER --reason TEXT
    callgate doctor                  # does the trust file load? does Redis answer?

Machine-readable output (run ids, JSON) goes to stdout; progress and errors to stderr.  Every
failure a person can fix ends as one ``callgate: …`` line and a code of the contract in
`callgate.ops.exits` (0 completed, 1 failed / refused / handed off, 2 usage, 3 conflict or not
found, 4 paused for a person, 5 Redis unreachable), which ``callgate --help`` prints.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import orjson

from callgate.client import CallgateClient
from callgate.compiled import check_build
from callgate.config import Settings
from callgate.ops import exits
from callgate.ops.dev_cli import (
    MCP_HELP,
    WEBHOOKS_HELP,
    already_running,
    mcp_file,
    remove_state,
    state_file_of,
    webhooks_file,
    worker_env,
    write_state,
)
from callgate.ops.run_options import APIS, add_spec_options, spec_from_args, tools_problem
from callgate.ops.stack import progress_to_stderr, sigterm_as_interrupt, wait_for_stop_signal
from callgate.ops.supervisor import prefix_sink
from callgate.ops.system import START_ERRORS, LocalSystem, SystemSpec
from callgate.runspec import parse_spec

COMMAND_MODULES = (
    "callgate.ops.inspect_cli",
    "callgate.ops.requeue_cli",
    "callgate.ops.approvals_cli",
    "callgate.ops.keys_cli",
    "callgate.ops.control_cli",
    "callgate.ops.conformance.cli",
    "callgate.ops.cases.cli",
    "callgate.ops.chaos.cli",
    "callgate.ops.bench.cli",
    "callgate.ops.dev_cli",
    "callgate.ops.tenants_cli",
    "callgate.ops.doctor_cli",
    "callgate.ops.explore.cli",
    "callgate.ops.deploy_cli",
    "callgate.ops.compile_cli",
    "callgate.api.serve",
)
"""Modules that bring their own subcommand: each defines ``add_command(subparsers)``, which
adds a parser whose ``handler`` takes the parsed args and returns an exit code (or a coroutine
that does)."""


def _dump(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


async def cmd_run(args: argparse.Namespace) -> int:
    """Submit (and with ``--wait`` see through) one run; the spec is checked before Redis is."""
    spec = parse_spec(spec_from_args(args))
    settings = Settings()
    problem = None if args.allow_no_tools else tools_problem(spec.allowed_tools, settings)
    if problem is not None:
        print(f"callgate: {problem}", file=sys.stderr)
        return exits.USAGE

    async def act(client: CallgateClient) -> int:
        run_id = await client.submit(spec)
        if not args.wait:
            _dump({"run_id": run_id}) if args.json else print(run_id)
            return exits.OK
        await client.wait(run_id, args.timeout)
        view = await client.view(run_id)
        if args.json:
            _dump(view)
        else:
            reason = f" ({view['reason']})" if view["reason"] else ""
            print(f"{run_id}: {view['status']}{reason}")
            if view["final_text"]:
                print(view["final_text"])
        return exits.exit_for_status(view["status"])

    return await exits.with_client(act, settings)


def cmd_up(args: argparse.Namespace) -> int:
    """Every worker as its own supervised process, until SIGINT/SIGTERM; 1 when it cannot
    start (said in one line)."""
    sigterm_as_interrupt()
    modules = (
        None if args.tools is None else tuple(m.strip() for m in args.tools.split(",") if m.strip())
    )
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        key_prefix=os.environ.get("CALLGATE_KEY_PREFIX", "cg"),
        tool_modules=modules,
        env=worker_env(args.mcp, args.webhooks),
        replicas={"webhooks": 1},
        grace_s=args.grace,
    )
    system = LocalSystem(spec, progress=progress_to_stderr, sink=prefix_sink(sys.stderr))
    state_file = state_file_of(system)
    if already_running(state_file, progress_to_stderr):
        return 1
    try:
        system.start()
        # Like `dev`: other terminals find this deployment (and its Redis's password) here.
        write_state(system, state_file)
        progress_to_stderr(f"running; Ctrl-C stops; other terminals join it via {state_file}")
        signum = wait_for_stop_signal()
        progress_to_stderr(f"signal {signum}: stopping")
    except START_ERRORS as exc:
        system.explain(exc, progress_to_stderr)
        return 1
    finally:
        system.stop()
        remove_state(state_file)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from callgate.ops.demo import DemoOptions, run_demo

    sigterm_as_interrupt()
    options = DemoOptions(
        name=args.name,
        api=args.api,
        input=args.input,
        model=args.model,
        timeout_s=args.timeout,
        verbose=args.verbose,
        approve_as=args.approve_as,
    )
    return run_demo(options)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (and argparse's exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            exits.USAGE, f"{self.prog}: {exits.one_line(message)} (see `{self.prog} --help`)\n"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="callgate",
        description=__doc__.split("\n")[0],
        epilog=exits.CONTRACT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_up_and_demo(sub)
    for module in COMMAND_MODULES:
        try:
            command = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        command.add_command(sub)
    return parser


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="submit a run",
        description="submit a run",
        epilog=exits.CONTRACT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_spec_options(run)
    run.add_argument(
        "--wait",
        action="store_true",
        help="wait until it ends or pauses; the "
        "exit code says which (0 completed, 1 ended otherwise, 4 paused)",
    )
    run.add_argument("--json", action="store_true", help="print JSON (the run view with --wait)")
    run.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds --wait may take (default: 120)",
    )
    run.set_defaults(handler=cmd_run)


def _add_up_and_demo(sub: Any) -> None:
    from callgate.ops.demo import DEMOS

    up = sub.add_parser(
        "up",
        help="start every worker (and Redis if none answers: an "
        "embedded one with a generated password, in HOME/dev.json only)",
    )
    up.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    up.add_argument(
        "--tools",
        help="tool modules the workers register, comma-separated "
        "(default: CALLGATE_TOOL_MODULES, else the demo's tools)",
    )
    up.add_argument("--mcp", type=mcp_file, metavar="FILE", help=MCP_HELP)
    up.add_argument("--webhooks", type=webhooks_file, metavar="FILE", help=WEBHOOKS_HELP)
    up.set_defaults(handler=cmd_up)

    demo = sub.add_parser("demo", help="run a demo end to end")
    demo.add_argument("name", choices=sorted(DEMOS))
    demo.add_argument("--api", choices=APIS)
    demo.add_argument("--input", help="default: the demo's own question")
    demo.add_argument(
        "--approve-as",
        metavar="USER",
        type=exits.person_name,
        help="workshop: approve as USER instead of asking in the terminal",
    )
    demo.add_argument("--model", help="default: the scripted scenario, or a real model")
    demo.add_argument("--timeout", type=float, default=60.0, help="seconds the run may take")
    demo.add_argument("--verbose", action="store_true", help="stream every process's output")
    demo.set_defaults(handler=cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a failure a person can fix is one line and a code of `exits.CONTRACT`."""
    args = build_parser().parse_args(argv)
    handler = args.handler
    try:
        check_build()  # a stale compiled copy would run the old release's steps
        result = handler(args)
        code = asyncio.run(result) if asyncio.iscoroutine(result) else result
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        failed = exits.failure(exc)
        if failed is None:
            raise  # a bug: its traceback is what a fix needs
        print(f"callgate: {failed[0]}", file=sys.stderr)
        return failed[1]
    assert isinstance(code, int)
    return code


if __name__ == "__main__":
    sys.exit(main())
