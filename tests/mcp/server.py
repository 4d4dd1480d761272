"""A real MCP server for the tests, built with the `mcp` SDK's `MCPServer`, run as its own process.

    python tests/mcp/server.py STATE_DIR stdio [no-listen]   # no-listen: refuse subscriptions
    python tests/mcp/server.py STATE_DIR http PORT

Its tools: ``forecast`` (read-only, sleeps so that two calls can be seen to overlap),
``set_status`` (idempotent; echoes the operation id it got in ``_meta``), ``note`` (no
annotations), ``cancel_order`` (destructive; commits, then for order ``"slow"`` sleeps past the
caller's timeout so the answer is lost) and ``find_cancellation`` (the lookup: did operation X
commit?).  ``set_price`` (idempotent) changes when ``evolve`` is called: an optional ``currency``,
or only a new description, announced to every session with ``tools/list_changed``.  Every start,
end, commit and tool listing is a line in ``STATE_DIR/events.jsonl`` — the server's own
record, shared by every process started with the same directory (a stdio server runs once per
worker process)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

OPERATION_KEY = "callgate/operation_id"
STATE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
server = MCPServer("callgate-test-shop", subscriptions=False if "no-listen" in sys.argv else None)


def record(event: str, **data: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), **data})
    with (STATE / "events.jsonl").open("a") as out:
        out.write(line + "\n")


def events() -> list[dict[str, Any]]:
    path = STATE / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def meta_value(ctx: Context, key: str) -> str | None:
    """A string the caller put in the request's ``_meta``."""
    meta: Any = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    value = (meta or {}).get(key)
    return value if isinstance(value, str) else None


def operation_of(ctx: Context) -> str | None:
    """The operation id the caller put in the request's ``_meta``."""
    return meta_value(ctx, OPERATION_KEY)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def forecast(city: str) -> dict[str, Any]:
    """Tomorrow's sky over a city."""
    record("start", tool="forecast", city=city)
    await anyio.sleep(0.4)
    record("end", tool="forecast", city=city)
    return {"city": city, "sky": "clear"}


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False)
)
async def set_status(text: str, ctx: Context) -> dict[str, Any]:
    """Set the shop's status line (the same operation twice sets it once)."""
    operation_id = operation_of(ctx)
    record("commit", tool="set_status", operation_id=operation_id, text=text)
    return {"status": text, "operation_id": operation_id}


@server.tool()
async def note(text: str, ctx: Context) -> dict[str, Any]:
    """Keep a note."""
    record("commit", tool="note", text=text, traceparent=meta_value(ctx, "traceparent"))
    return {"noted": text}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
async def cancel_order(order: str, ctx: Context) -> dict[str, Any]:
    """Cancel an order for good."""
    operation_id = operation_of(ctx)
    record("commit", tool="cancel_order", operation_id=operation_id, order=order)
    if order == "slow":
        await anyio.sleep(30)  # committed; the caller gives up before the answer comes
    return {"cancelled": order}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def find_cancellation(operation_id: str) -> dict[str, Any]:
    """Whether the cancellation with this operation id was committed, and what it did."""
    for event in events():
        if event.get("tool") == "cancel_order" and event.get("operation_id") == operation_id:
            record("lookup", operation_id=operation_id, found=True)
            return {"applied": True, "result": {"cancelled": event["order"]}}
    record("lookup", operation_id=operation_id, found=False)
    return {"applied": False}


PRICE_HINTS = ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False)


@server.tool(annotations=PRICE_HINTS)
async def set_price(item: str, cents: int) -> dict[str, Any]:
    """Set an item's price."""
    record("commit", tool="set_price", item=item, cents=cents)
    return {"item": item, "cents": cents}


async def set_price_in(item: str, cents: int, currency: str = "EUR") -> dict[str, Any]:
    """Set an item's price, in any currency."""
    record("commit", tool="set_price", item=item, cents=cents, currency=currency)
    return {"item": item, "cents": cents, "currency": currency}


async def set_price_now(item: str, cents: int) -> dict[str, Any]:
    """Set an item's price, effective at once for every open order."""
    record("commit", tool="set_price", item=item, cents=cents)
    return {"item": item, "cents": cents}


@server.tool()
async def evolve(ctx: Context, with_currency: bool = False) -> dict[str, Any]:
    """Replace ``set_price`` with its next version (a new argument, or without ``with_currency``
    the same arguments and a new meaning) and tell every listening session."""
    server.remove_tool("set_price")
    server.add_tool(
        set_price_in if with_currency else set_price_now, name="set_price", annotations=PRICE_HINTS
    )
    record("evolved")
    await ctx.notify_tools_changed()  # to 2026-07-28 sessions that listen
    await ctx.session.send_tool_list_changed()  # to this session, on an older protocol
    return {"evolved": True}


_list_tools = server.list_tools


async def list_tools_recorded() -> Any:
    record("listed")
    return await _list_tools()


server.list_tools = list_tools_recorded  # type: ignore[method-assign]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def whoami() -> dict[str, Any]:
    """The server process's id (a test kills it to see the session re-opened)."""
    return {"pid": os.getpid()}


if __name__ == "__main__":
    if sys.argv[2] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
