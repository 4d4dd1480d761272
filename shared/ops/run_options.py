"""`callgate run`'s options: one flag per `RunSpec` field, and the checks made before submitting.

Everything here runs before Redis is touched, so a typo, an unreadable input file or a run
whose every tool call would be refused costs one line and exit 2, not a queued job that fails
later.  Large inputs come from a file (``--input-file PATH``) or stdin (``--input -``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, get_args

import orjson

from callgate.config import Settings
from callgate.records import Api, BatchPolicy
from callgate.runspec import RunSpec
from callgate.tools.registry import RegistryError, load_registry

APIS: tuple[Api, ...] = get_args(Api)
BATCH_POLICIES: tuple[BatchPolicy, ...] = get_args(BatchPolicy)


def max_length(field: str) -> int:
    """The longest text `RunSpec` takes in ``field`` (checked here to say so in one line)."""
    for rule in RunSpec.model_fields[field].metadata:
        limit = getattr(rule, "max_length", None)
        if isinstance(limit, int):
            return limit
    raise LookupError(field)


def json_object(text: str) -> dict[str, Any]:
    """An option holding a JSON object (``--identity``, ``--acceptance``)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _text_of(where: str, read: Any, field: str) -> str:
    try:
        text = str(read())
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {where}: {exc}") from exc
    limit = max_length(field)
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{where} is empty")
    if len(text) > limit:
        raise argparse.ArgumentTypeError(
            f"{where} has {len(text):,} characters; a run's {field} holds at most {limit:,}"
        )
    return text


def input_text(value: str) -> str:
    """``--input``: the text itself, or ``-`` for stdin."""
    if value == "-":
        return _text_of("stdin", sys.stdin.read, "input")
    return _text_of("the input", lambda: value, "input")


def input_file(path: str) -> str:
    """``--input-file``: the file's UTF-8 text."""
    return _text_of(path, lambda: Path(path).read_text(encoding="utf-8"), "input")


def instructions_file(path: str) -> str:
    """``--instructions-file``: the file's UTF-8 text."""
    return _text_of(path, lambda: Path(path).read_text(encoding="utf-8"), "instructions")


def _add_task_options(run: argparse.ArgumentParser) -> None:
    """What the model is asked and for whom: the fields a spec must have (instructions aside)."""
    run.add_argument("--api", choices=APIS, required=True, help="the provider wire protocol")
    run.add_argument("--model", required=True, help="the model name the provider is asked for")
    given = run.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--input",
        type=input_text,
        metavar="TEXT",
        help="the user's task, the first user message; - reads it from stdin",
    )
    given.add_argument(
        "--input-file",
        type=input_file,
        dest="input",
        metavar="PATH",
        help="read the task from a UTF-8 file",
    )
    rules = run.add_mutually_exclusive_group()
    rules.add_argument("--instructions", metavar="TEXT", help="system / developer instructions")
    rules.add_argument(
        "--instructions-file",
        type=instructions_file,
        dest="instructions",
        metavar="PATH",
        help="read the instructions from a UTF-8 file",
    )
    run.add_argument(
        "--identity",
        type=json_object,
        required=True,
        metavar="JSON",
        help='who the run acts for, e.g. {"user": "alice", "roles": ["finance"]}',
    )


def _add_limit_options(run: argparse.ArgumentParser) -> None:
    """How far the run may go and what it must end with: its budgets, how long a person may
    take to decide, the batch policy while one does, and the rule for the final answer."""
    run.add_argument(
        "--max-turns",
        type=int,
        default=10,
        metavar="N",
        help="model turns before the run is handed off (default: 10)",
    )
    run.add_argument(
        "--max-total-tokens",
        type=int,
        metavar="N",
        help="input + output tokens before the run is handed off",
    )
    run.add_argument(
        "--deadline-s",
        type=float,
        metavar="S",
        help="wall-clock budget in seconds from the run's creation",
    )
    run.add_argument(
        "--approval-ttl-s",
        type=float,
        metavar="S",
        help="how long a person has "
        "to decide a call of this run (default: CALLGATE_APPROVAL_TTL_S)",
    )
    run.add_argument(
        "--batch-policy",
        choices=BATCH_POLICIES,
        default="hold_effects",
        help="while calls wait for a person: hold_effects runs only reads, "
        "run_allowed also runs the allowed writes (default: hold_effects)",
    )
    run.add_argument(
        "--acceptance",
        type=json_object,
        metavar="JSON",
        help='a rule for the final answer: {"contains": …}, {"json_schema": …} '
        'or {"validator": NAME}',
    )


def add_spec_options(run: argparse.ArgumentParser) -> None:
    """One flag per `RunSpec` field, each with help; in the order `--help` lists them: the
    task, the tools and the run's id, then its limits."""
    _add_task_options(run)
    run.add_argument(
        "--tools",
        default="",
        metavar="NAMES",
        help="the registered tools the run may use, by tool name, comma-separated "
        "(default: every tool the deployment registered)",
    )
    run.add_argument(
        "--allow-no-tools",
        action="store_true",
        help="submit even if no registered tool is selected, so every tool call "
        "the model makes would be refused",
    )
    run.add_argument(
        "--run-id",
        help="the run's id (default: a new one); submitting the same "
        "spec again under it is harmless",
    )
    _add_limit_options(run)


def spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The run spec `callgate run` submits."""
    spec: dict[str, Any] = {
        "api": args.api,
        "model": args.model,
        "input": args.input,
        "identity": args.identity,
        "allowed_tools": selected_tools(args.tools),
        "max_turns": args.max_turns,
        "batch_policy": args.batch_policy,
    }
    optional = {
        "instructions": args.instructions,
        "run_id": args.run_id,
        "deadline_s": args.deadline_s,
        "max_total_tokens": args.max_total_tokens,
        "approval_ttl_s": args.approval_ttl_s,
        "acceptance": args.acceptance,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    return spec


def selected_tools(text: str) -> list[str] | None:
    """``--tools`` as the spec's allow-list; None (every registered tool) when empty."""
    return [t.strip() for t in text.split(",") if t.strip()] or None


def tools_problem(selected: list[str] | None, settings: Settings) -> str | None:
    """Why every tool call of this run would be refused, if it would; else None.

    A name with a dot is a module, which the deployment registers and a run never names.  The
    registry itself is known here only when CALLGATE_TOOL_MODULES is set (and imports) and no
    MCP servers are: the workers may have been started with other tools than this terminal sees.
    """
    modules = [name for name in selected or () if "." in name or "/" in name]
    if modules:
        return (
            f"--tools takes tool names, not modules: {', '.join(modules)} — the deployment "
            "registers modules (CALLGATE_TOOL_MODULES, `callgate up --tools`) and a run "
            "selects their tools by name"
        )
    if "tool_modules" not in settings.model_fields_set or settings.mcp_servers:
        return None  # MCP servers' tools are known only to the workers connected to them
    try:
        registry = load_registry(settings.tool_modules)
    except RegistryError:
        return None
    if not len(registry):
        return (
            "no tools are registered (CALLGATE_TOOL_MODULES is empty): every tool call of "
            "this run would be refused — register tool modules, or pass --allow-no-tools"
        )
    unknown = registry.unknown(selected or ())
    if unknown:
        return (
            f"--tools names tools not registered: {', '.join(unknown)} (registered: "
            f"{', '.join(registry.names())}) — pick registered names, or pass "
            "--allow-no-tools"
        )
    return None
