"""One worker's MCP sessions against a real stdio MCP server (tests/mcp/server.py, started by the
session as its child): the tools listed at start, a killed server re-opened for the next read,
and an unreachable server costing its tools, not the worker."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from callgate.errors import ToolError
from callgate.records import Effect
from callgate.tools.mcp_connection import McpConnection
from callgate.tools.mcp_servers import McpServer
from callgate.tools.mcp_source import open_mcp_tools, to_result

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "server.py"


def _stdio(state: Path, **entry: object) -> McpServer:
    return McpServer.model_validate(
        {
            "name": "shop",
            "trusted": True,
            "command": [sys.executable, str(SERVER), str(state), "stdio"],
            **entry,
        }
    )


async def test_tools_are_listed_with_their_effects(tmp_path: Path) -> None:
    opened = await open_mcp_tools((_stdio(tmp_path),), 2.0)
    try:
        effects = {tool.name: tool.effect for tool, _ in opened.tools}
        assert effects == {
            "shop__forecast": Effect.READ,
            "shop__whoami": Effect.READ,
            "shop__set_status": Effect.IDEMPOTENT_WRITE,
            "shop__note": Effect.WRITE,
            "shop__cancel_order": Effect.WRITE,
            "shop__set_price": Effect.IDEMPOTENT_WRITE,
            "shop__evolve": Effect.WRITE,
            "shop__find_cancellation": Effect.READ,
        }
    finally:
        await opened.close()


async def test_a_killed_server_is_reopened_for_the_next_read(tmp_path: Path) -> None:
    connection = McpConnection(_stdio(tmp_path))
    try:
        first = to_result(await connection.call("whoami", {}, None, retry=True))["pid"]
        os.kill(first, signal.SIGKILL)
        second = to_result(await connection.call("whoami", {}, None, retry=True))["pid"]
        assert second != first
    finally:
        await connection.close()


async def test_an_unreachable_server_costs_its_tools_not_the_worker(tmp_path: Path) -> None:
    down = McpServer.model_validate({"name": "down", "url": "http://127.0.0.1:9/mcp"})
    opened = await open_mcp_tools((down, _stdio(tmp_path, prefix="")), 2.0)
    try:
        assert "forecast" in [tool.name for tool, _ in opened.tools]
        assert not [tool for tool, _ in opened.tools if tool.name.startswith("down__")]
        with pytest.raises(ToolError) as refused:
            await McpConnection(down).call("forecast", {"city": "x"}, None, retry=False)
        assert refused.value.code == "unavailable"
    finally:
        await opened.close()


async def test_a_write_goes_out_only_on_a_session_that_answers(tmp_path: Path) -> None:
    connection = McpConnection(_stdio(tmp_path))
    try:
        first = to_result(await connection.call("whoami", {}, None, retry=True))["pid"]
        await connection.call("note", {"text": "kept"}, None, retry=False)
        assert to_result(await connection.call("whoami", {}, None, retry=True))["pid"] == first
        os.kill(first, signal.SIGKILL)  # the session broke while idle: found before sending
        answer = to_result(await connection.call("note", {"text": "after"}, None, retry=False))
        assert answer == {"noted": "after"}
        notes = [
            line
            for line in (tmp_path / "events.jsonl").read_text().splitlines()
            if '"note"' in line
        ]
        assert len(notes) == 2
    finally:
        await connection.close()
