"""The benchmark's MCP server: ``bench_read`` behind MCP, so `callgate bench --scenario mcp`
can put an MCP read's round trip beside the local tool's (`callgate.ops.bench.tools`).

    python -m callgate.ops.bench.mcp_server stdio
    python -m callgate.ops.bench.mcp_server http PORT
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("callgate-bench")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def bench_read(key: str) -> dict[str, Any]:
    """Read one value by key; answers at once."""
    return {"key": key, "value": f"value of {key}"}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["http"] and len(args) == 2:
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
