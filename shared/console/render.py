"""HTML out: one Jinja2 environment with autoescape on (every model text, argument and tool
result is escaped by default), and the headers every console answer carries — a strict
Content-Security-Policy (scripts and styles only from this origin's static files, no inline
script), no framing, no referrer (a login link's token never leaks), no caching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from callgate.api.problems import TITLES
from callgate.ops.trace import wall_clock

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _pretty(value: Any) -> str:
    """JSON for people to read (escaped by the template like any other text)."""
    return orjson.dumps(
        value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str
    ).decode()


def _compact(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()


ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["pretty"] = _pretty
ENV.filters["compact"] = _compact
ENV.filters["wall"] = wall_clock
ENV.filters["title_of"] = lambda status: TITLES.get(status, "error")


def fragment(template: str, **context: Any) -> str:
    """A rendered template (a whole page or a live fragment)."""
    return ENV.get_template(template).render(**context)


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A whole page with the console's headers."""
    return HTMLResponse(fragment(template, **context), status_code=status, headers=HEADERS)
