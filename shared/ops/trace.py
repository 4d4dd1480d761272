"""Render a run's event log as a table a person can read (`callgate trace RUN_ID`).

The event log is already redacted when it is written (shared/redact.py); rendering passes
every detail through `redact` once more, so a trace printed to a terminal or pasted into a
ticket can never carry a secret even if an older writer forgot.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from callgate.records import Event
from callgate.redact import redact

COLUMNS = ("+time", "event", "turn", "call", "tool", "state", "detail")
CLOCK = "utc"
"""The wall-clock column `callgate trace` puts first: when, not only how long after."""
DETAIL_MAX = 80
_STRUCTURED = frozenset(
    {"turn", "call_id", "tool", "from", "to", "from_state", "to_state", "run_id", "status"}
)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _short(text: str, width: int | None) -> str:
    text = " ".join(text.split())
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def wall_clock(t_ms: int) -> str:
    """``t_ms`` as an ISO-8601 UTC time to the millisecond."""
    moment = datetime.fromtimestamp(t_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t_ms % 1000:03d}Z"


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


def detail(data: dict[str, Any], width: int | None = DETAIL_MAX) -> str:
    """Every field not shown in its own column (and not empty), as ``key=value``, cut to
    ``width`` (None: whole)."""
    parts = [
        f"{key}={_text(value)}"
        for key, value in data.items()
        if key not in _STRUCTURED and value is not None
    ]
    return _short(" ".join(parts), width)


def rows(
    events: Iterable[Event], *, clock: bool = False, full: bool = False
) -> list[tuple[str, ...]]:
    """One row of `COLUMNS` per event; time is the offset from the first event.  With
    ``clock`` each row starts with its `wall_clock` time; ``full`` cuts no detail."""
    out: list[tuple[str, ...]] = []
    start: int | None = None
    for event in events:
        start = event.t_ms if start is None else start
        data = redact(event.data)
        if not isinstance(data, dict):
            data = {"value": data}
        turn = data.get("turn")
        out.append(
            (
                *((wall_clock(event.t_ms),) if clock else ()),
                f"+{(event.t_ms - start) / 1000:.3f}s",
                event.type,
                "" if turn is None else str(turn),
                _text(data.get("call_id", "")),
                _text(data.get("tool", "")),
                transition(data),
                detail(data, None if full else DETAIL_MAX),
            )
        )
    return out


def render(
    events: Iterable[Event],
    header: Sequence[str] = COLUMNS,
    *,
    clock: bool = False,
    full: bool = False,
) -> str:
    """The events as an aligned plain-text table (no colour, safe for logs and pipes)."""
    body = rows(events, clock=clock, full=full)
    if not body:
        return "(no events)"
    table = [(CLOCK, *header) if clock else tuple(header), *body]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def as_json(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The events as data (`callgate trace --json`): whole, with their wall-clock time, and
    redacted like the table."""
    return [
        {
            "id": e.id,
            "t_ms": e.t_ms,
            "time": wall_clock(e.t_ms),
            "type": e.type,
            "data": redact(e.data),
        }
        for e in events
    ]
