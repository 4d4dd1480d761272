"""The console's pages — runs, a run, the inbox — and their live fragments over Server-Sent
Events: each page names a fragment URL, ``console.js`` opens an `EventSource` on it, and the
server sends the fragment again (rendered and escaped here, like the page) whenever it changed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from callgate.api.callers import Caller
from callgate.api.context import ApiContext, context_of, current_caller
from callgate.api.problems import Problem
from callgate.console import views
from callgate.console.render import HEADERS, fragment, page

router = APIRouter(include_in_schema=False)

LIVE_POLL_S = 0.5
"""How often a live fragment is rendered again (sent only when it changed)."""
LIVE_FOR_S = 300.0
"""A live stream ends after this long; the browser's EventSource reconnects by itself."""
KEEP_ALIVE_S = 15.0
LOGIN = "/console/login"

Gather = Callable[[ApiContext, Caller], Awaitable[dict[str, Any]]]


async def signed_in(request: Request) -> Caller | None:
    """The caller, or None when the request proves no one (then the page sends them to sign
    in); a 403 is raised as a `Problem`."""
    try:
        return await current_caller(request)
    except Problem as exc:
        if exc.status == 401:
            return None
        raise


def problem_page(request: Request, exc: Problem, caller: Caller | None) -> Response:
    """A refusal as a page: its status and its one line, exactly as the API says it."""
    return page(
        "problem.html",
        status=exc.status,
        caller=caller,
        csrf=csrf_of(request),
        status_code=exc.status,
        detail=exc.detail,
    )


async def signed_page(request: Request, template: str, gather: Gather, **extra: Any) -> Response:
    """``template`` with what ``gather`` finds (and ``extra``) for a signed-in caller; anyone
    else is sent to sign in, and a refusal becomes the problem page."""
    caller = await signed_in(request)
    if caller is None:
        return RedirectResponse(LOGIN, status_code=303)
    try:
        data = await gather(context_of(request), caller)
    except Problem as exc:
        return problem_page(request, exc, caller)
    return page(template, caller=caller, csrf=csrf_of(request), **extra, **data)


def csrf_of(request: Request) -> str:
    """The session's CSRF token, which every form of the page carries ("" signed out)."""
    session = request.app.state.sessions.read(request)
    return "" if session is None else str(session.csrf)


@router.get("/")
async def runs_page(request: Request) -> Response:
    return await signed_page(request, "runs.html", views.runs_list, live="/console/live/runs")


@router.get("/console/inbox")
async def inbox_page(request: Request) -> Response:
    return await signed_page(request, "inbox.html", views.inbox_items, live="/console/live/inbox")


@router.get("/console/runs/{run_id}")
async def run_page(request: Request, run_id: str) -> Response:
    async def gather(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
        return await views.run_page(ctx, caller, run_id)

    return await signed_page(request, "run.html", gather, live=f"/console/live/runs/{run_id}")


@router.get("/console/live/runs")
async def runs_live(request: Request) -> Response:
    return await _live(request, "_runs.html", views.runs_list)


@router.get("/console/live/inbox")
async def inbox_live(request: Request) -> Response:
    return await _live(request, "_inbox.html", views.inbox_items)


@router.get("/console/live/runs/{run_id}")
async def run_live(request: Request, run_id: str) -> Response:
    async def gather(ctx: ApiContext, caller: Caller) -> dict[str, Any]:
        return await views.run_page(ctx, caller, run_id)

    return await _live(request, "_run.html", gather)


async def _live(request: Request, template: str, gather: Gather) -> Response:
    caller = await signed_in(request)
    if caller is None:
        raise Problem(401, "no valid console session (sign in again)")
    frames = follow(request, caller, template, gather)
    return StreamingResponse(
        frames, media_type="text/event-stream", headers={**HEADERS, "X-Accel-Buffering": "no"}
    )


async def follow(
    request: Request, caller: Caller, template: str, gather: Gather
) -> AsyncIterator[bytes]:
    """The fragment now, then again whenever it changed, for `LIVE_FOR_S` (a closed
    connection ends it earlier: the response stops at the disconnect)."""
    ctx, csrf = context_of(request), csrf_of(request)
    last, quiet_since = None, time.monotonic()
    deadline = quiet_since + LIVE_FOR_S
    yield b"retry: 1000\n\n"
    while time.monotonic() < deadline:
        try:
            html = fragment(template, caller=caller, csrf=csrf, **await gather(ctx, caller))
        except Problem as exc:
            html = fragment("_problem.html", status_code=exc.status, detail=exc.detail)
        if html != last:
            last, quiet_since = html, time.monotonic()
            yield sse_frame(html)
        elif time.monotonic() - quiet_since > KEEP_ALIVE_S:
            quiet_since = time.monotonic()
            yield b": keep-alive\n\n"
        await asyncio.sleep(LIVE_POLL_S)


def sse_frame(html: str) -> bytes:
    """An ``html`` event whose data is the fragment, one ``data:`` line per line."""
    lines = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: html\n{lines}\n".encode()
