"""What `callgate status | view | runs | dead-letters` show a person, and give a script.

Pure: records and stream fields in, JSON-ready dicts and rich tables out.  Every cell is a
`rich.text.Text`, so a value that looks like markup (``[redacted]``, a model's ``[bold]``) is
shown as written, never interpreted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from callgate.logs import mask_url_password
from callgate.ops.trace import wall_clock
from callgate.records import RunRecord
from callgate.redact import redact

CELL_MAX = 60
"""Longest free-text cell (reason, arguments, final answer) in a table; --json has it whole."""


def _str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if value is None or isinstance(value, str):
        return value or ""
    return orjson.dumps(value, default=str).decode()


def _cell(value: Any, width: int | None = CELL_MAX) -> Text:
    text = " ".join(_str(value).split())
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return Text(text)


def _when(t_ms: int | None) -> str:
    return wall_clock(t_ms) if t_ms else ""


def run_row(run: RunRecord) -> dict[str, Any]:
    """One run of `callgate runs --json`."""
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "reason": run.reason,
        "created": _when(run.created_ms),
        "created_ms": run.created_ms,
        "updated_ms": run.updated_ms,
        "api": run.api,
        "model": run.model,
        "turns": run.turn,
        "user": run.identity.get("user"),
    }


def runs_table(rows: list[dict[str, Any]]) -> Table:
    """`callgate runs`: newest first."""
    table = Table(
        "created (UTC)",
        "run",
        "status",
        "turns",
        "user",
        "model",
        "reason",
        title=f"{len(rows)} run(s)",
        title_justify="left",
    )
    for row in rows:
        table.add_row(
            *(
                _cell(row[k])
                for k in ("created", "run_id", "status", "turns", "user", "model", "reason")
            )
        )
    return table


def _envelope(raw: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def dead_letter_row(partition: int, entry_id: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One dead letter as data: where it came from, why, and what it was (kind, run) as far
    as it still decodes; the reason with URL passwords and whole-value secrets masked, the
    message's own payload left out."""
    t_ms = int(entry_id.split("-", 1)[0])
    envelope = _envelope(fields.get("d"))
    count = _str(fields.get("delivery_count"))
    return {
        "partition": partition,
        "id": entry_id,
        "t_ms": t_ms,
        "time": wall_clock(t_ms),
        "stream": _str(fields.get("stream")),
        "group": _str(fields.get("group")),
        "message_id": _str(fields.get("message_id")),
        "delivery_count": int(count) if count.isdigit() else None,
        "kind": envelope.get("kind"),
        "run_id": envelope.get("run_id"),
        "reason": redact(mask_url_password(_str(fields.get("reason")))),
    }


def dead_letters_table(rows: list[dict[str, Any]], full: bool = False) -> Table:
    """`callgate dead-letters`: newest first."""
    table = Table(
        "time (UTC)",
        "stream",
        "group",
        "kind",
        "run",
        "deliveries",
        "reason",
        title=f"{len(rows)} dead letter(s)",
        title_justify="left",
    )
    for row in rows:
        table.add_row(
            *(
                _cell(row[k])
                for k in ("time", "stream", "group", "kind", "run_id", "delivery_count")
            ),
            _cell(row["reason"], None if full else CELL_MAX),
        )
    return table


STATUS_FIELDS = (
    "run_id",
    "status",
    "reason",
    "api",
    "model",
    "input",
    "instructions",
    "turn",
    "max_turns",
    "max_total_tokens",
    "usage_input_tokens",
    "usage_output_tokens",
    "identity",
    "vouched_by",
    "allowed_tools",
    "batch_policy",
    "approval_ttl_s",
    "acceptance",
    "deadline_ms",
    "created_ms",
    "updated_ms",
    "final_text",
)


def status_table(status: Mapping[str, Any]) -> Table:
    """`callgate status`: the run record, one field a line, times as wall-clock."""
    table = Table(
        "field",
        "value",
        show_header=False,
        title=f"run {status.get('run_id')}",
        title_justify="left",
    )
    for name in STATUS_FIELDS:
        value = status.get(name)
        if value in (None, "", [], {}):
            continue
        if name.endswith("_ms") and isinstance(value, int):
            value = f"{_when(value)} ({value})"
        table.add_row(Text(name), _cell(value, None if name == "final_text" else CELL_MAX))
    return table


def _outcome(result: Any) -> str:
    """``ok <payload>`` or ``<code>: <message>`` of a call's stored result."""
    if not isinstance(result, dict):
        return ""
    if result.get("status") == "ok":
        return f"ok {_str(result.get('payload'))}"
    error = result.get("error") or {}
    return f"{error.get('code')}: {error.get('message')}"


def view_renderable(view: Mapping[str, Any]) -> RenderableType:
    """`callgate view`: the run's outcome, then every call in turn and provider order."""
    usage = view.get("usage") or {}
    head = Text(
        f"run {view['run_id']}: {view['status']}"
        + (f" ({view['reason']})" if view.get("reason") else "")
        + f" · {view['api']} {view['model']} · {view['turns']} turn(s) · "
        f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"
    )
    calls = Table(
        "turn",
        "call",
        "tool",
        "state",
        "decision",
        "reason",
        "arguments",
        "result",
        title=f"{len(view['calls'])} call(s)",
        title_justify="left",
    )
    for call in view["calls"]:
        outcome = _outcome(call.get("result"))
        calls.add_row(
            _cell(call["turn"]),
            _cell(call["call_id"]),
            _cell(call["tool"]),
            _cell(call["state"]),
            _cell(call.get("decision")),
            _cell(call.get("reason")),
            _cell(call.get("arguments")),
            _cell(outcome),
        )
    parts: list[RenderableType] = [head, calls]
    if view.get("final_text"):
        parts.append(Text(view["final_text"]))
    return Group(*parts)
