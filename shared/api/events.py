"""`GET /runs/{run_id}/events`: the run's trace, as JSON or as Server-Sent Events.

The trace is the run's event stream in Redis: a ledger step's events share one entry, so an
event's SSE ``id`` is its entry's id, with ``.1``, ``.2``, … after it for the step's later events.
With ``Accept: text/event-stream`` the answer follows the run live (XREAD BLOCK from the last id
sent) and a reconnecting client's ``Last-Event-ID`` resumes right after the last event it got:
every event arrives once, in order, however often the connection drops.  The stream ends (an
``end`` event) once the run has ended and every event is sent; a quiet run gets a keep-alive
comment every ``sse_block_ms``.  Events are redacted as `callgate trace --json` shows them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from callgate.api.context import ApiContext, Ctx, Who
from callgate.api.problems import PROBLEM_SCHEMA, Problem
from callgate.ledger.reads import redis_errors
from callgate.ops.trace import as_json
from callgate.records import entry_events, event_order, read_from
from callgate.states import RUN_TERMINAL
from callgate.streams.commands import text

router = APIRouter(tags=["events"], responses={code: PROBLEM_SCHEMA for code in (401, 404)})

SSE_MEDIA_TYPE = "text/event-stream"
EVENT_ID = re.compile(r"^\d+-\d+(\.\d+)?$")
READ_COUNT = 100
LINGER_MS = 1000
"""How long a stream stays open, quiet, after its run ended."""


def sse_frame(event: dict[str, Any]) -> bytes:
    """One event as an SSE frame: its stream id, its type, its JSON."""
    data = orjson.dumps(event).decode()
    return f"id: {event['id']}\nevent: {event['type']}\ndata: {data}\n\n".encode()


def _start_id(last_event_id: str | None, after: str | None) -> str:
    start = last_event_id or after or "0-0"
    if not EVENT_ID.match(start):
        raise Problem(422, "Last-Event-ID / after: use an event id this API sent (e.g. 1700-0.1)")
    return start


@router.get(
    "/runs/{run_id}/events",
    responses={
        200: {
            "description": "the trace as JSON, or as text/event-stream when asked",
            "content": {"application/json": {}, SSE_MEDIA_TYPE: {}},
        }
    },
)
async def run_events(
    ctx: Ctx,
    caller: Who,
    request: Request,
    run_id: str,
    after: Annotated[str | None, Query(description="only events after this event id")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Any:
    """The run's events; live SSE with ``Accept: text/event-stream``."""
    start = _start_id(last_event_id, after)
    await ctx.readable_run(run_id, caller)
    if SSE_MEDIA_TYPE in request.headers.get("accept", ""):
        return StreamingResponse(
            follow(ctx, run_id, start),
            media_type=SSE_MEDIA_TYPE,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    return {"run_id": run_id, "events": await trace(ctx, run_id, start)}


async def trace(ctx: ApiContext, run_id: str, start: str = "0-0") -> list[dict[str, Any]]:
    """The run's events after ``start``, redacted (what the route answers; the console's
    timeline too)."""
    after = event_order(start)
    return as_json(e for e in await ctx.client.events(run_id) if event_order(e.id) > after)


async def follow(ctx: ApiContext, run_id: str, start: str) -> AsyncIterator[bytes]:
    """Every event after ``start``, live, until the run has ended and a quiet `LINGER_MS`
    passed (a write in flight at a cancel still settles after the run ended)."""
    sent, entry = start, read_from(start)  # the last event sent; the entry to read after
    ended = False
    yield b"retry: 1000\n\n"
    while True:
        block_ms = LINGER_MS if ended else ctx.api.sse_block_ms
        events, entry = await _read(ctx, run_id, entry, sent, block_ms)
        for event in events:
            sent = event["id"]
            yield sse_frame(event)
        if not events and ended:
            yield f"event: end\ndata: {orjson.dumps({'run_id': run_id}).decode()}\n\n".encode()
            return
        run = await ctx.client.run(run_id)
        ended = run is None or run.status in RUN_TERMINAL
        if not events and not ended:
            yield b": keep-alive\n\n"


async def _read(
    ctx: ApiContext, run_id: str, entry: str, sent: str, block_ms: int
) -> tuple[list[dict[str, Any]], str]:
    """The run's events after event ``sent``, from the entries after ``entry``, waiting up to
    ``block_ms`` for the first; and the last entry read (the next read's ``entry``)."""
    stream = ctx.client.keys.events(run_id)
    with redis_errors():
        reply = await ctx.client.redis.xread({stream: entry}, count=READ_COUNT, block=block_ms)
    entries = [item for _, batch in reply or [] for item in batch]
    after = event_order(sent)
    events = [
        event
        for entry_id, fields in entries
        for event in entry_events(entry_id, fields)
        if event_order(event.id) > after
    ]
    return as_json(events), (text(entries[-1][0]) if entries else entry)
