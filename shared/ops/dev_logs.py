"""How `callgate dev` shows what its children print: readable on a terminal, JSON for machines.

Workers log one JSON object per line (`callgate.logs`), already redacted; the stand-ins print
plain text.  On a terminal each line becomes ``time  name  level  message  key=value`` with
colours; anywhere else (a pipe, a file, ``--log-format json``) every line is one JSON object
with the child's name as ``service``, so a log shipper never has to parse two formats.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import IO, Any, Literal

import orjson
from rich.console import Console
from rich.text import Text

from callgate.logs import mask_url_password
from callgate.ops.supervisor import Sink

LogFormat = Literal["auto", "pretty", "json"]
LEVEL_STYLES = {
    "debug": "dim",
    "info": "green",
    "warning": "yellow",
    "error": "bold red",
    "critical": "bold red",
}
_ENVELOPE = ("ts", "level", "service", "logger", "msg", "exc")
"""Fields every worker line has; what is left over is shown as ``key=value``."""


def wants_pretty(log_format: LogFormat, stream: IO[str]) -> bool:
    return log_format == "pretty" or (log_format == "auto" and stream.isatty())


def parse(line: str) -> dict[str, Any] | None:
    """The JSON object a worker printed, or None for a plain line."""
    if not line.startswith("{"):
        return None
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def pretty_text(name: str, line: str, now_s: float | None = None) -> Text:
    """One child's line for a person: a `Text`, so nothing in the line is read as markup."""
    entry = parse(line)
    ts = entry.get("ts") if entry is not None else None
    stamp = time.strftime("%H:%M:%S", time.localtime(ts if isinstance(ts, float | int) else now_s))
    text = Text(f"{stamp} ", style="dim")
    text.append(f"{name:>15} ", style="cyan")
    if entry is None:
        return text.append(mask_url_password(line))
    level = str(entry.get("level", "info")).lower()
    text.append(f"{level:<8}", style=LEVEL_STYLES.get(level, ""))
    text.append(str(entry.get("msg", "")))
    extra = {k: v for k, v in entry.items() if k not in _ENVELOPE}
    if extra:
        text.append("  " + " ".join(f"{k}={_short(v)}" for k, v in extra.items()), style="dim")
    if entry.get("exc"):
        text.append("\n" + str(entry["exc"]), style="red")
    return text


def json_line(name: str, line: str, now_s: float | None = None) -> str:
    """One child's line as one JSON object naming the child (a worker's line kept as it is)."""
    entry = parse(line)
    if entry is None:
        entry = {"ts": round(now_s or time.time(), 3), "level": "info", "msg": line}
        return mask_url_password(orjson.dumps({**entry, "service": name}).decode())
    if entry.get("service") == name:
        return line
    return orjson.dumps({**entry, "service": name, "child": entry.get("service")}).decode()


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= 120 else text[:117] + "..."


def dev_sink(log_format: LogFormat, stream: IO[str]) -> tuple[Sink, Console | None]:
    """The supervisor's sink for ``log_format`` on ``stream``, and the console it prints
    through when pretty (None when JSON).  Lines from the pump threads never interleave."""
    lock = threading.Lock()
    if wants_pretty(log_format, stream):
        console = Console(file=stream, highlight=False, soft_wrap=True)

        def pretty(name: str, line: str) -> None:
            with lock:
                console.print(pretty_text(name, line))

        return pretty, console

    def plain(name: str, line: str) -> None:
        with lock:
            stream.write(json_line(name, line) + "\n")
            stream.flush()

    return plain, None


def json_event(msg: str, fields: Mapping[str, Any]) -> str:
    """`callgate dev`'s own line (the banner, when not on a terminal)."""
    entry = {"ts": round(time.time(), 3), "level": "info", "service": "dev", "msg": msg}
    return orjson.dumps({**entry, **fields}).decode()
