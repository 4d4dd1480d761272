"""A loopback HTTP/1.1 server that answers every request with one recorded fixture.

Raw asyncio rather than a framework, so a test controls the bytes on the socket: the
body is sent chunked (optionally a few bytes per chunk), can stall before the body, and
can be cut after N bytes with the chunked body left unterminated, which is what a
dropped connection looks like to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any


@dataclass
class Reply:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    chunk_size: int | None = None
    """Write the body this many bytes per HTTP chunk (None: one chunk)."""
    drop_after: int | None = None
    """Close the socket after this many body bytes, leaving the chunked body unterminated."""
    stall_s: float = 0.0
    """Wait this long after the headers before the body."""

    @classmethod
    def from_file(cls, path: Path, status: int = 200, **kwargs: Any) -> Reply:
        content_type = "text/event-stream" if path.suffix == ".sse" else "application/json"
        return cls(body=path.read_bytes(), status=status, content_type=content_type, **kwargs)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FixtureServer:
    """Serves `reply` to every request and records what was asked in `requests`."""

    def __init__(self, reply: Reply | None = None) -> None:
        self.reply = reply or Reply(body=b"{}")
        self.requests: list[Received] = []
        self._server: asyncio.Server | None = None
        self._port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> FixtureServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _read_request(self, reader: asyncio.StreamReader) -> Received:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = json.loads(raw) if raw else None
        return Received(method, path, headers, body)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.requests.append(await self._read_request(reader))
            await self._respond(writer, self.reply)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _respond(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        try:
            reason = HTTPStatus(reply.status).phrase
        except ValueError:
            reason = "Error"
        headers = {
            "content-type": reply.content_type,
            "transfer-encoding": "chunked",
            "connection": "close",
            **reply.headers,
        }
        head = f"HTTP/1.1 {reply.status} {reason}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()
        if reply.stall_s:
            await asyncio.sleep(reply.stall_s)
        body = reply.body if reply.drop_after is None else reply.body[: reply.drop_after]
        step = reply.chunk_size or max(len(body), 1)
        for start in range(0, len(body), step):
            chunk = body[start : start + step]
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        if reply.drop_after is not None:
            writer.transport.abort()
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()
