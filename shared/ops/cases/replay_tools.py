"""The deployment's own tools as a replay answers them: a tool module for `callgate cases run`.

The replaying system's workers load this module as their only tool module
(``CALLGATE_TOOL_MODULES``); it loads the deployment's real tool modules
(``CALLGATE_REPLAY_TOOL_MODULES``, which `cases run` takes from the operator's own settings,
never from a case file) and registers every tool again under its own name, version, schema,
effect, authorization and approval rule — so validation is the deployment's own, unchanged.
Only what reaches the outside world is replaced:

* a read answers with the call's recorded result (the live tool with
  ``CALLGATE_REPLAY_LIVE_READS=1``);
* a write never runs: a recording stub counts it and answers as the recorded call ended (a
  lost answer when it was reconciled, and its reconciliation as recorded);
* preconditions pass, or fail with the recorded reason (run live with live reads).

Recordings are files `cases run` writes per replay run (``<dir>/runs/<run id>.json``: call id
→ how it ended); every execution is appended to ``<dir>/executed/<run id>.jsonl``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from callgate.errors import ToolError
from callgate.records import Effect
from callgate.tools.contract import Reconciliation, Tool, ToolContext
from callgate.tools.registry import AcceptanceValidator, load_registry

REPLAY_DIR = "CALLGATE_REPLAY_DIR"
REPLAY_TOOL_MODULES = "CALLGATE_REPLAY_TOOL_MODULES"
LIVE_READS = "CALLGATE_REPLAY_LIVE_READS"
PRECONDITION_FAILED = "precondition_failed"
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class LostAnswer(TimeoutError):
    """The recorded call's answer was lost: the replay loses it again, for the reconciler."""


def recording_path(folder: Path, run_id: str) -> Path:
    return folder / "runs" / f"{run_id}.json"


def executions_path(folder: Path, run_id: str) -> Path:
    return folder / "executed" / f"{run_id}.jsonl"


def _folder() -> Path:
    return Path(os.environ[REPLAY_DIR])


@functools.lru_cache(maxsize=256)
def _recording(run_id: str) -> Mapping[str, Any]:
    """Call id → the recorded call, for one replay run (none for an id that is no file name)."""
    if not _RUN_ID.fullmatch(run_id):
        return {}
    path = recording_path(_folder(), run_id)
    return orjson.loads(path.read_bytes()) if path.is_file() else {}


def _recorded(ctx: ToolContext) -> Mapping[str, Any] | None:
    found = _recording(ctx.run_id).get(ctx.call_id)
    return found if isinstance(found, dict) else None


def _count(ctx: ToolContext, tool: Tool[Any]) -> None:
    if not _RUN_ID.fullmatch(ctx.run_id):
        return
    path = executions_path(_folder(), ctx.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"tool": tool.name, "effect": tool.effect.value, "call_id": ctx.call_id}
    with path.open("ab") as out:
        out.write(orjson.dumps(line) + b"\n")


def _answer(recorded: Mapping[str, Any] | None) -> dict[str, Any]:
    """The recorded result: its payload, or its error raised as the tool raised it."""
    if recorded is None:
        raise ToolError("the case recorded no result for this call", code="not_recorded")
    result = recorded.get("result") or {}
    if result.get("status") == "ok":
        payload = result.get("payload")
        return payload if isinstance(payload, dict) else {"value": payload}
    error = result.get("error") or {}
    raise ToolError(str(error.get("message", "")), code=str(error.get("code", "tool_error")))


def _lost(recorded: Mapping[str, Any] | None) -> bool:
    return recorded is not None and "unknown" in recorded.get("path", ())


def replayed(tool: Tool[Any], live_reads: bool) -> Tool[Any]:
    """``tool`` with its effects answered from the recording."""

    async def execute(ctx: ToolContext, args: BaseModel, operation_id: str) -> dict[str, Any]:
        _count(ctx, tool)
        if tool.effect is Effect.READ and live_reads:
            return await tool.execute(ctx, args, operation_id)
        recorded = _recorded(ctx)
        if tool.effect is not Effect.READ and _lost(recorded):
            raise LostAnswer("the recorded answer was lost")
        return _answer(recorded)

    async def reconcile(ctx: ToolContext, args: BaseModel, operation_id: str) -> Reconciliation:
        recorded = _recorded(ctx) or {}
        path = recorded.get("path", ())
        if "unresolved" in path:
            return Reconciliation(found="unknown")
        if recorded.get("state") == "succeeded":
            return Reconciliation(found="applied", result=_answer(recorded))
        return Reconciliation(found="not_applied")

    async def preconditions(ctx: ToolContext, args: BaseModel) -> str | None:
        if live_reads:
            return await tool.preconditions(ctx, args)
        error = ((_recorded(ctx) or {}).get("result") or {}).get("error") or {}
        return str(error["message"]) if error.get("code") == PRECONDITION_FAILED else None

    return dataclasses.replace(
        tool,
        execute=execute,
        reconcile=reconcile if tool.is_write else tool.reconcile,
        preconditions=preconditions,
    )


def _load() -> tuple[list[Tool[Any]], dict[str, AcceptanceValidator]]:
    modules = [m for m in os.environ.get(REPLAY_TOOL_MODULES, "").split(",") if m]
    registry = load_registry(modules)
    live = os.environ.get(LIVE_READS) == "1"
    return [replayed(t, live) for t in registry], dict(registry.validators)


TOOLS, ACCEPTANCE = _load()
