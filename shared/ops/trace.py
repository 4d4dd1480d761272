"""Render a run's event log as a table a person can read (`callgate trace RUN_ID`).

The event log is already redacted when it is written (shared/redact.py); rendering passes
every detail through `redact` once more, so a trace printed to a terminal or pasted into a
ticket can never carry a secret even if an older writer forgot.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from callgate.records import Event
from callgate.redact import redact

COLUMNS = ("+time", "event", "turn", "call", "tool", "state", "detail")
DETAIL_MAX = 80
_STRUCTURED = frozenset({"turn", "call_id", "tool", "from", "to", "from_state", "to_state",
                         "run_id", "status"})


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def transition(data: dict[str, Any]) -> str:
    """``from→to`` from whichever spelling the writer used; ``→to`` for a first state.

    The ledger records ``from`` as the guard's allowed sources; a list shows as ``a|b``.
    """
    source = data.get("from", data.get("from_state"))
    target = data.get("to", data.get("to_state", data.get("status")))
    if source is None and target is None:
        return ""
    return f"{_state(source)}→{_state(target)}"


def _state(value: Any) -> str:
    """A state, or the guard's allowed sources (the ledger records a list) as ``a|b``."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "|".join(str(v) for v in value)
    return str(value)


def detail(data: dict[str, Any], width: int = DETAIL_MAX) -> str:
    """Every field not shown in its own column (and not empty), as ``key=value``, cut to
    ``width``."""
    parts = [
        f"{key}={_text(value)}"
        for key, value in data.items()
        if key not in _STRUCTURED and value is not None
    ]
    return _short(" ".join(parts), width)


def rows(events: Iterable[Event]) -> list[tuple[str, ...]]:
    """One row of `COLUMNS` per event; time is the offset from the first event."""
    out: list[tuple[str, ...]] = []
    start: int | None = None
    for event in events:
        start = event.t_ms if start is None else start
        data = redact(event.data)
        if not isinstance(data, dict):
            data = {"value": data}
        turn = data.get("turn")
        out.append((
            f"+{(event.t_ms - start) / 1000:.3f}s",
            event.type,
            "" if turn is None else str(turn),
            _text(data.get("call_id", "")),
            _text(data.get("tool", "")),
            transition(data),
            detail(data),
        ))
    return out


def render(events: Iterable[Event], header: Sequence[str] = COLUMNS) -> str:
    """The events as an aligned plain-text table (no colour, safe for logs and pipes)."""
    body = rows(events)
    if not body:
        return "(no events)"
    table = [tuple(header), *body]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
