"""Scenario ``mcp``: one read's round trip through an MCP server beside the same read as a
local tool — what putting a tool behind MCP costs per call, on this machine.

The same ``bench_read`` is called ``calls`` times in a row, after a warm-up, three ways: the
local `Tool` (`callgate.ops.bench.tools`), the MCP tool over stdio and over Streamable HTTP
(`callgate.ops.bench.mcp_server`, one session each, as a worker holds it).  Only the tool call
is timed, through `Tool.execute`: the rest of a run's round trip is the same for all three.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from typing import Any

import aiohttp

from callgate.ops.bench import mcp_server
from callgate.ops.bench.report import percentile
from callgate.ops.bench.tools import bench_read
from callgate.ops.embedded_redis import free_port
from callgate.ops.stack import Progress
from callgate.tools.contract import Tool, context_of
from callgate.tools.mcp_servers import McpServer
from callgate.tools.mcp_source import open_mcp_tools

WARM_UP = 5
START_TIMEOUT_S = 15.0


async def measure(calls: int, progress: Progress) -> dict[str, Any]:
    """p50/p99 ms of a local read and of an MCP read over stdio and HTTP."""
    module = [sys.executable, "-m", mcp_server.__name__]
    port = free_port()
    http = subprocess.Popen(
        [*module, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await _listening(port)
        async with aiohttp.ClientSession() as session:
            times = {"local": await _timed(bench_read, session, calls)}
            for name, entry in (
                ("stdio", {"command": [*module, "stdio"]}),
                ("http", {"url": f"http://127.0.0.1:{port}/mcp"}),
            ):
                progress(f"mcp: {calls} reads over {name}")
                server = McpServer.model_validate(
                    {"name": "bench", "trusted": True, "prefix": "", **entry}
                )
                opened = await open_mcp_tools((server,), 5.0)
                try:
                    [(tool, _)] = opened.tools
                    times[name] = await _timed(tool, session, calls)
                finally:
                    await opened.close()
    finally:
        http.kill()
        http.wait(10)
    summary: dict[str, Any] = {}
    for name, samples in times.items():
        summary[f"{name}_p50_ms"] = percentile(samples, 50)
        summary[f"{name}_p99_ms"] = percentile(samples, 99)
    return summary


async def _timed(tool: Tool[Any], session: aiohttp.ClientSession, calls: int) -> list[float]:
    ctx = context_of("bench", "t1.0", 1, {"user": "bench"}, session)
    args = tool.validate({"key": "k1"})
    samples = []
    for index in range(WARM_UP + calls):
        started = time.perf_counter()
        await tool.execute(ctx, args, "")
        if index >= WARM_UP:
            samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _listening(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.05)
    raise TimeoutError("the benchmark's MCP server did not start")
