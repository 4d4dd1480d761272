"""The notes service: the authoritative system behind the example's tools.

    python -m notes_agent.service --port 8780 [--db notes.sqlite3]   # "listening on http://…"

It owns the truth about notes, so when an answer to a write is lost, callgate's reconciler asks
*it* whether the note was made (``GET /operations/{operation_id}``), and never writes again.
Notes live in SQLite (``--db FILE``; the default ``:memory:`` lasts as long as the process), so
they outlive every callgate worker: a worker that crashes mid-request leaves the note here.

* ``GET /notebooks/{notebook}/notes?query=Q`` → ``{"notebook", "notes": [{note_id, title,
  author}]}``, newest first, titles containing Q (case-insensitive).
* ``POST /notebooks/{notebook}/notes`` ``{title, text, author, operation_id}`` → 201 with the
  note's summary (never its text); 200 with the same summary when ``operation_id`` was seen
  with the same arguments; 422 when it was seen with other ones.
* ``GET /operations/{operation_id}`` → 200 with the note made under it, 404 when none.

For tests and demos: ``POST /_faults {"drop_after_commit": N}`` makes the next N writes
commit and then close the connection with no answer (the write's outcome is then unknown to
the caller); ``GET /_stats`` → ``{"write_requests": {title: n}, "notes": {title: n}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    note_id INTEGER PRIMARY KEY AUTOINCREMENT,
    notebook TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    operation_id TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL
)
"""
SUMMARY = "note_id, notebook, title, author, operation_id"


class NewNote(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=120)
    text: str = Field(min_length=1, max_length=4000)
    author: str = Field(min_length=1, max_length=64)
    operation_id: str = Field(min_length=1, max_length=128)


@dataclass
class Notes:
    """The store, and what tests read: write requests and notes per title."""

    db: sqlite3.Connection
    write_requests: Counter[str] = field(default_factory=Counter)
    drop_after_commit: int = 0

    def search(self, notebook: str, query: str) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT note_id, title, author FROM notes WHERE notebook = ? AND instr(lower(title),"
            " lower(?)) > 0 ORDER BY note_id DESC LIMIT 20",
            (notebook, query),
        )
        return [{"note_id": r[0], "title": r[1], "author": r[2]} for r in rows]

    def by_operation(self, operation_id: str) -> dict[str, Any] | None:
        row = self.db.execute(
            f"SELECT {SUMMARY}, text FROM notes WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        if row is None:
            return None
        keys = (*SUMMARY.split(", "), "text")
        return dict(zip(keys, row, strict=True))

    def add(self, notebook: str, note: NewNote) -> tuple[int, dict[str, Any]]:
        """(201, summary) for a new note; (200, summary) for a repeat of the same operation;
        (422, error) for an operation id already used with other arguments."""
        existing = self.by_operation(note.operation_id)
        if existing is not None:
            same = existing.pop("text") == note.text and existing["notebook"] == notebook
            if same and (existing["title"], existing["author"]) == (note.title, note.author):
                return 200, existing
            return 422, {"error": "operation id already used for another note"}
        with self.db:  # one transaction: the note is committed before any answer is sent
            self.db.execute(
                "INSERT INTO notes (notebook, title, text, author, operation_id, created_ms)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    notebook,
                    note.title,
                    note.text,
                    note.author,
                    note.operation_id,
                    int(time.time() * 1000),
                ),
            )
        created = self.by_operation(note.operation_id)
        assert created is not None
        created.pop("text")
        return 201, created

    def stats(self) -> dict[str, Any]:
        rows = self.db.execute("SELECT title, count(*) FROM notes GROUP BY title")
        return {"write_requests": dict(self.write_requests), "notes": dict(rows.fetchall())}


NOTES = web.AppKey("notes", Notes)


async def search(request: web.Request) -> web.Response:
    notebook = request.match_info["notebook"]
    notes = request.app[NOTES].search(notebook, request.query.get("query", ""))
    return web.json_response({"notebook": notebook, "notes": notes})


async def add(request: web.Request) -> web.Response:
    store = request.app[NOTES]
    try:
        note = NewNote.model_validate_json(await request.read())
    except ValidationError as exc:
        return web.json_response({"error": str(exc.errors(include_url=False))}, status=400)
    store.write_requests[note.title] += 1
    status, body = store.add(request.match_info["notebook"], note)
    if store.drop_after_commit > 0 and status == 201:
        store.drop_after_commit -= 1
        if request.transport is not None:
            request.transport.close()  # committed, but the caller never hears of it
    return web.json_response(body, status=status)


async def lookup(request: web.Request) -> web.Response:
    found = request.app[NOTES].by_operation(request.match_info["operation_id"])
    if found is None:
        return web.json_response({"error": "no note was made under this operation id"}, status=404)
    found.pop("text")
    return web.json_response(found)


async def faults(request: web.Request) -> web.Response:
    body = await request.json()
    request.app[NOTES].drop_after_commit = int(body.get("drop_after_commit", 0))
    return web.json_response({"drop_after_commit": request.app[NOTES].drop_after_commit})


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[NOTES].stats())


def make_app(db_path: str) -> web.Application:
    db = sqlite3.connect(db_path)
    db.execute(SCHEMA)
    app = web.Application()
    app[NOTES] = Notes(db)
    app.router.add_get("/notebooks/{notebook}/notes", search)
    app.router.add_post("/notebooks/{notebook}/notes", add)
    app.router.add_get("/operations/{operation_id}", lookup)
    app.router.add_post("/_faults", faults)
    app.router.add_get("/_stats", stats)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT; print ``listening on URL`` once connections are accepted."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"listening on http://{host}:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="The notes service behind the example agent.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8780, help="0 picks a free port")
    parser.add_argument("--db", default=":memory:", help="SQLite file (default: in memory)")
    args = parser.parse_args()
    asyncio.run(serve(make_app(args.db), args.host, args.port))


if __name__ == "__main__":
    main()
