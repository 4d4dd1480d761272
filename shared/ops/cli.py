"""`callgate …`: submit and inspect runs, start a deployment, run the demo.

    callgate run --api openai-responses --model M --tools callgate.standins.demo.travel \\
        --identity '{"user": "alice"}' --input "…" [--max-turns N] [--wait] [--json] [--timeout S]
    callgate status RUN_ID | view RUN_ID | trace RUN_ID
    callgate up
    callgate demo travel|workshop [--api A] [--input TEXT] [--approve-as USER]
    callgate approvals | approve ID --as USER | deny ID --as USER --reason TEXT

Machine-readable output (run ids, JSON) goes to stdout; progress and errors to stderr.  Exit
codes: 0 done / completed, 1 the run ended otherwise or the command failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.errors import CallgateError
from callgate.ops.stack import progress_to_stderr, sigterm_as_interrupt, wait_for_stop_signal
from callgate.ops.supervisor import prefix_sink
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.ops.trace import render
from callgate.records import Api

APIS: tuple[Api, ...] = ("openai-responses", "openai-chat", "anthropic-messages")
COMMAND_MODULES = (
    "callgate.ops.approvals_cli",
    "callgate.ops.keys_cli",
    "callgate.ops.control_cli",
    "callgate.ops.conformance.cli",
    "callgate.ops.chaos.cli",
    "callgate.ops.bench.cli",
)
"""Modules that bring their own subcommand: each defines ``add_command(subparsers)``, which
adds a parser whose ``handler`` takes the parsed args and returns an exit code (or a coroutine
that does)."""


def _dump(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The run spec `callgate run` submits."""
    spec: dict[str, Any] = {
        "api": args.api,
        "model": args.model,
        "input": args.input,
        "identity": args.identity,
        "allowed_tools": [t.strip() for t in args.tools.split(",") if t.strip()] or None,
        "max_turns": args.max_turns,
    }
    optional = {"instructions": args.instructions, "run_id": args.run_id,
                "deadline_s": args.deadline_s}
    spec.update({k: v for k, v in optional.items() if v is not None})
    return spec


async def _with_client(action: Callable[[CallgateClient], Awaitable[int]]) -> int:
    async with CallgateClient(Settings()) as client:
        return await action(client)


async def cmd_run(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        run_id = await client.submit(spec_from_args(args))
        if not args.wait:
            _dump({"run_id": run_id}) if args.json else print(run_id)
            return 0
        await client.wait(run_id, args.timeout)
        view = await client.view(run_id)
        if args.json:
            _dump(view)
        else:
            reason = f" ({view['reason']})" if view["reason"] else ""
            print(f"{run_id}: {view['status']}{reason}")
            if view["final_text"]:
                print(view["final_text"])
        return 0 if view["status"] == "completed" else 1

    return await _with_client(act)


async def cmd_status(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        _dump(await client.status(args.run_id))
        return 0

    return await _with_client(act)


async def cmd_view(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        _dump(await client.view(args.run_id))
        return 0

    return await _with_client(act)


async def cmd_trace(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        print(render(await client.events(args.run_id)))
        return 0

    return await _with_client(act)


def cmd_up(args: argparse.Namespace) -> int:
    """Every worker as its own supervised process, until SIGINT/SIGTERM."""
    sigterm_as_interrupt()
    modules = None if args.tools is None else tuple(
        m.strip() for m in args.tools.split(",") if m.strip()
    )
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        key_prefix=os.environ.get("CALLGATE_KEY_PREFIX", "cg"),
        tool_modules=modules,
        grace_s=args.grace,
    )
    system = LocalSystem(spec, progress=progress_to_stderr, sink=prefix_sink(sys.stderr))
    try:
        system.start()
        progress_to_stderr("running; Ctrl-C stops")
        signum = wait_for_stop_signal()
        progress_to_stderr(f"signal {signum}: stopping")
    finally:
        system.stop()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from callgate.ops.demo import DemoOptions, run_demo

    sigterm_as_interrupt()
    options = DemoOptions(name=args.name, api=args.api, input=args.input, model=args.model,
                          timeout_s=args.timeout, verbose=args.verbose,
                          approve_as=args.approve_as)
    return run_demo(options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="callgate", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    for name, handler, text in (("status", cmd_status, "the run record as JSON"),
                                ("view", cmd_view, "the run and its calls as JSON"),
                                ("trace", cmd_trace, "the run's event log as a table")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("run_id")
        cmd.set_defaults(handler=handler)
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
    run = sub.add_parser("run", help="submit a run")
    run.add_argument("--api", choices=APIS, required=True)
    run.add_argument("--model", required=True)
    run.add_argument("--tools", default="",
                     help="the registered tools the run may use, comma-separated (default: all)")
    run.add_argument("--identity", type=_json_object, required=True, help='e.g. {"user": "alice"}')
    run.add_argument("--input", required=True)
    run.add_argument("--instructions")
    run.add_argument("--run-id")
    run.add_argument("--max-turns", type=int, default=10)
    run.add_argument("--deadline-s", type=float)
    run.add_argument("--wait", action="store_true", help="wait until it ends or pauses")
    run.add_argument("--json", action="store_true", help="print JSON (the run view with --wait)")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds --wait may take")
    run.set_defaults(handler=cmd_run)


def _add_up_and_demo(sub: Any) -> None:
    from callgate.ops.demo import DEMOS

    up = sub.add_parser("up", help="start every worker (and Redis if none answers)")
    up.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    up.add_argument("--tools", help="tool modules the workers register, comma-separated "
                    "(default: CALLGATE_TOOL_MODULES, else the demo's tools)")
    up.set_defaults(handler=cmd_up)

    demo = sub.add_parser("demo", help="run a demo end to end")
    demo.add_argument("name", choices=sorted(DEMOS))
    demo.add_argument("--api", choices=APIS)
    demo.add_argument("--input", help="default: the demo's own question")
    demo.add_argument("--approve-as", metavar="USER",
                      help="workshop: approve as USER instead of asking in the terminal")
    demo.add_argument("--model", help="default: the scripted scenario, or a real model")
    demo.add_argument("--timeout", type=float, default=60.0)
    demo.add_argument("--verbose", action="store_true", help="stream every process's output")
    demo.set_defaults(handler=cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    try:
        result = handler(args)
        code = asyncio.run(result) if asyncio.iscoroutine(result) else result
    except (CallgateError, TimeoutError) as exc:
        print(f"callgate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    assert isinstance(code, int)
    return code


if __name__ == "__main__":
    sys.exit(main())
