"""A worker's MCP tools against a real stdio MCP server (tests/mcp/server.py, the session's
child): the server's ``tools/list_changed`` rebuilds the tools with a new version, a server
that went away is found again without a call, and a write reconciles through a local lookup
function the deployment named."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from callgate.ops.embedded_redis import free_port
from callgate.records import Effect
from callgate.tools import mcp_connection
from callgate.tools.contract import Reconciliation, Tool, context_of
from callgate.tools.mcp_servers import McpServer
from callgate.tools.mcp_source import McpTools, open_mcp_tools, to_result
from tests.mcp.hooks import STATE_SETTING

pytestmark = pytest.mark.timeout(30)
SERVER = Path(__file__).resolve().parents[1] / "mcp" / "server.py"


def _stdio(state: Path, **entry: object) -> McpServer:
    argv = [sys.executable, str(SERVER), str(state), "stdio"]
    return McpServer.model_validate({"name": "shop", "trusted": True, "command": argv, **entry})


def _tool(opened: McpTools, name: str) -> Tool[Any]:
    [tool] = [tool for tool, _ in opened.tools if tool.name == name]
    return tool


async def _until(check: Callable[[], bool], timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_changed_tool_list_rebuilds_the_tool_with_a_new_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Followed on a 2026-07-28 session (listen) and on an older one (the notification)."""
    monkeypatch.setattr(mcp_connection, "CONNECT_MODE", mode)
    opened = await open_mcp_tools((_stdio(tmp_path),), 2.0)
    changes: list[int] = []
    opened.on_change = lambda: changes.append(1)
    try:
        before = _tool(opened, "shop__set_price")
        assert "currency" not in before.json_schema()["properties"]
        await opened.connections[0].call("evolve", {"with_currency": True}, None, retry=False)
        await _until(lambda: bool(changes))
        after = _tool(opened, "shop__set_price")
        assert after.version != before.version  # an approval bound to `before` no longer fits
        assert "currency" in after.json_schema()["properties"]
        assert after.effect is Effect.IDEMPOTENT_WRITE
    finally:
        await opened.close()


async def test_a_server_that_went_away_is_found_again_without_a_call(tmp_path: Path) -> None:
    opened = await open_mcp_tools((_stdio(tmp_path),), 2.0)
    connection = opened.connections[0]
    try:
        first = to_result(await connection.call("whoami", {}, None, retry=True))["pid"]
        listed = _listings(tmp_path)
        os.kill(first, signal.SIGKILL)  # its listen stream ends: the worker re-opens, re-reads
        await _until(lambda: _listings(tmp_path) > listed)
        second = to_result(await connection.call("whoami", {}, None, retry=True))["pid"]
        assert second != first
    finally:
        await opened.close()


async def test_a_server_that_refuses_to_be_listened_to_is_not_reconnected_in_a_loop(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, str(SERVER), str(tmp_path), "stdio", "no-listen"]
    server = McpServer.model_validate({"name": "shop", "trusted": True, "command": argv})
    opened = await open_mcp_tools((server,), 2.0)
    try:
        first = to_result(await opened.connections[0].call("whoami", {}, None, retry=True))
        await asyncio.sleep(1.0)  # a reconnect loop would have re-read the list by now
        again = to_result(await opened.connections[0].call("whoami", {}, None, retry=True))
        assert (again, _listings(tmp_path)) == (first, 1)
    finally:
        await opened.close()


async def test_a_server_down_at_start_joins_when_it_answers(tmp_path: Path) -> None:
    port = free_port()
    server = McpServer.model_validate({"name": "shop", "url": f"http://127.0.0.1:{port}/mcp"})
    opened = await open_mcp_tools((server,), 2.0)
    changes: list[int] = []
    opened.on_change = lambda: changes.append(1)
    argv = [sys.executable, str(SERVER), str(tmp_path), "http", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert opened.tools == []  # down: no tools, and the worker started
        await _until(lambda: bool(changes), timeout_s=15)  # nobody called: it kept trying
        assert "shop__forecast" in [tool.name for tool, _ in opened.tools]
    finally:
        await opened.close()
        process.kill()
        process.wait(10)


def _listings(state: Path) -> int:
    return (state / "events.jsonl").read_text().count('"listed"')


async def test_a_write_reconciles_through_the_deployments_local_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_SETTING, str(tmp_path))
    policy = {"cancel_order": {"lookup": "tests.mcp.hooks:find_cancellation"}}
    opened = await open_mcp_tools((_stdio(tmp_path, tools=policy),), 2.0)
    try:
        tool = _tool(opened, "shop__cancel_order")
        assert tool.effect is Effect.WRITE
        ctx = context_of("r", "c", 1, {"user": "alice"}, session=None)  # type: ignore[arg-type]
        args = tool.validate({"order": "A7"})
        assert await tool.reconcile(ctx, args, "op_1") == Reconciliation("not_applied")  # type: ignore[misc]
        await tool.execute(ctx, args, "op_1")
        found = await tool.reconcile(ctx, args, "op_1")  # type: ignore[misc]
        assert found == Reconciliation("applied", {"cancelled": "A7", "found_by": "local"})
    finally:
        await opened.close()
