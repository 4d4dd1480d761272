"""Tiny shared plumbing for the demo HTTP services: serve an aiohttp app, launch one as a process.

A demo service is a real process (the tools reach it over loopback HTTP, and conformance
counts executions on the service, not in callgate).  It prints exactly one line,
``listening on http://127.0.0.1:<port>``, flushed, once it accepts connections; port 0 picks
a free port, and `launch` reads that line to learn the URL.

Every tool request carries the run, call and operation ids as headers (`tool_headers`), so a
service can count what each run did and scope injected faults to one run: conformance runs
many cases at once against one service and must tell their executions apart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

if TYPE_CHECKING:
    from callgate.tools.contract import ToolContext

LISTENING = "listening on "
RUN_ID_HEADER = "X-Callgate-Run-Id"
CALL_ID_HEADER = "X-Callgate-Call-Id"
OPERATION_ID_HEADER = "X-Callgate-Operation-Id"


def tool_headers(ctx: ToolContext, operation_id: str) -> dict[str, str]:
    """The ids a tool sends with every request (an empty operation id: a precondition check)."""
    return {
        RUN_ID_HEADER: ctx.run_id,
        CALL_ID_HEADER: ctx.call_id,
        OPERATION_ID_HEADER: operation_id,
    }


def run_id_of(request: web.Request) -> str | None:
    """The run a request was made for, if the caller said."""
    return request.headers.get(RUN_ID_HEADER) or None


@dataclass
class RunTally:
    """Counts per run (requests per endpoint, effects): what ``GET /_stats/runs/{run_id}`` shows."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, run_id: str | None, key: str) -> None:
        if run_id is not None:
            self.counts.setdefault(run_id, Counter())[key] += 1

    def of(self, run_id: str) -> dict[str, int]:
        return dict(self.counts.get(run_id, {}))

    def clear(self) -> None:
        self.counts.clear()


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def configure_from(
    request: web.Request, configure: Callable[[Any, str | None], None]
) -> str | None:
    """Hand a test endpoint's JSON body to ``configure(update, run_id)`` (``?run_id=R`` scopes
    it to one run); the reason it was refused, or None."""
    try:
        configure(orjson.loads(await request.read()), request.query.get("run_id") or None)
    except ValueError as exc:  # bad JSON and pydantic's ValidationError are ValueErrors
        return str(exc)
    return None


Handler = Callable[[web.Request], Awaitable[web.Response]]


def add_bookkeeping(
    app: web.Application, *, stats: Handler, run_stats: Handler, reset: Callable[[], None]
) -> None:
    """The test endpoints every demo service has: ``GET /_stats``, ``GET /_stats/runs/{run_id}``
    (what conformance counts per run) and ``POST /_reset`` (calls ``reset``)."""

    async def reset_handler(request: web.Request) -> web.Response:
        reset()
        return web.json_response({"ok": True})

    app.router.add_get("/_stats", stats)
    app.router.add_get("/_stats/runs/{run_id}", run_stats)
    app.router.add_post("/_reset", reset_handler)


async def serve(app: web.Application, *, host: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT, then stop promptly (in-flight handlers get 1 s)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_port = runner.addresses[0][1]
    print(f"{LISTENING}http://{host}:{bound_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def service_parser(description: str, *, port: int) -> argparse.ArgumentParser:
    """The command line of a demo service: ``--host`` and ``--port`` (0 = a free port); a
    service adds its own options before parsing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    return parser


def run_service(app: web.Application, args: argparse.Namespace) -> None:
    """The end of a demo service's ``main()``: serve ``app`` on ``--host``/``--port``."""
    asyncio.run(serve(app, host=args.host, port=args.port))


@dataclass
class ServiceProcess:
    """A launched demo service; `stop` is safe to call twice."""

    proc: subprocess.Popen[bytes]
    url: str

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def launch(
    module: str,
    *,
    port: int = 0,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> ServiceProcess:
    """Start ``python -m <module> --port <port>`` and wait for its listening line."""
    cmd = [sys.executable, "-m", module, "--port", str(port), *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, env=dict(env if env is not None else os.environ)
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready: list[Any] = select.select([proc.stdout], [], [], max(remaining, 0))[0]
        if not ready:
            ServiceProcess(proc, "").stop()
            raise TimeoutError(f"{module} did not report listening within {timeout_s} s")
        chunk = os.read(proc.stdout.fileno(), 1024)
        if not chunk:
            ServiceProcess(proc, "").stop()
            raise RuntimeError(f"{module} exited (code {proc.poll()}) before listening")
        line += chunk
    text = line.split(b"\n", 1)[0].decode().strip()
    if not text.startswith(LISTENING):
        ServiceProcess(proc, "").stop()
        raise RuntimeError(f"{module} printed {text!r} instead of its listening line")
    return ServiceProcess(proc, text.removeprefix(LISTENING))
