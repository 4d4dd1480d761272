"""MCP tools without I/O: the fail-closed effect table, the server entries, the strict argument
model built from a server's schema, and the `Tool` a listed tool becomes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from pydantic import ValidationError

from callgate.config import Settings
from callgate.ops.cli import build_parser
from callgate.ops.dev_cli import dev_spec, mcp_env
from callgate.records import Effect
from callgate.tools.contract import Reconciliation, context_of
from callgate.tools.mcp_connection import McpConnection
from callgate.tools.mcp_schema import SchemaError, args_model_from_schema
from callgate.tools.mcp_servers import McpServer, choose_effect, parse_servers
from callgate.tools.mcp_source import build_tool
from callgate.tools.registry import ToolRegistry

SCHEMA = {
    "type": "object",
    "title": "cancelArguments",
    "properties": {
        "order": {"title": "Order", "type": "string", "maxLength": 8},
        "count": {"type": "integer", "minimum": 1, "default": 1},
        "mode": {"enum": ["soft", "hard"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["order"],
}


@pytest.mark.parametrize(
    ("hints", "trusted", "effect", "why"),
    [
        ({"readOnlyHint": True}, True, Effect.READ, "annotation: readOnlyHint"),
        (
            {"readOnlyHint": False, "idempotentHint": True},
            True,
            Effect.IDEMPOTENT_WRITE,
            "annotation: idempotentHint",
        ),
        ({"destructiveHint": True}, True, Effect.WRITE, "default: not read-only, not idempotent"),
        (None, True, Effect.WRITE, "default: no annotations"),
        ({}, True, Effect.WRITE, "default: no annotations"),
        (
            {"readOnlyHint": True},
            False,
            Effect.WRITE,
            "default: untrusted server, annotations ignored",
        ),
        (
            {"idempotentHint": True},
            False,
            Effect.WRITE,
            "default: untrusted server, annotations ignored",
        ),
        ({"readOnlyHint": "yes"}, True, Effect.WRITE, "default: not read-only, not idempotent"),
    ],
)
def test_effects_fail_closed(
    hints: dict[str, Any] | None, trusted: bool, effect: Effect, why: str
) -> None:
    choice = choose_effect(hints, trusted)
    assert (choice.effect, choice.describe()) == (effect, why)


def test_server_entries_are_checked() -> None:
    [shop, local] = parse_servers(
        (
            {"name": "shop", "url": "http://x/mcp", "trusted": True},
            {"name": "local", "command": ["srv"], "prefix": ""},
        )
    )
    assert (shop.tool_prefix, shop.trusted, local.tool_prefix, local.trusted) == (
        "shop__",
        True,
        "",
        False,
    )
    for bad in (
        {"name": "x"},
        {"name": "x", "url": "u", "command": ["c"]},
        {"name": "x", "url": "u", "extra": 1},
        {"name": "a b", "url": "u"},
    ):
        with pytest.raises(ValueError, match="CALLGATE_MCP_SERVERS"):
            parse_servers((bad,))
    with pytest.raises(ValueError, match="repeat"):
        parse_servers(({"name": "a", "url": "u"}, {"name": "a", "url": "v"}))


def test_the_setting_is_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLGATE_MCP_SERVERS", '[{"name": "shop", "url": "http://x/mcp"}]')
    assert Settings().mcp_servers == ({"name": "shop", "url": "http://x/mcp"},)


def test_arguments_are_validated_as_strictly_as_a_local_tools() -> None:
    model = args_model_from_schema("shop__cancel", SCHEMA)
    ok = model.model_validate_json('{"order": "a1", "mode": "hard", "tags": ["x"]}', strict=True)
    assert ok.model_dump(exclude_none=True) == {
        "order": "a1",
        "count": 1,
        "mode": "hard",
        "tags": ["x"],
    }
    for bad in (
        '{"order": "a1", "extra": 1}',
        '{"count": 2}',
        '{"order": 5}',
        '{"order": "a1", "count": "2"}',
        '{"order": "a1", "count": 0}',
        '{"order": "123456789"}',
        '{"order": "a", "mode": "x"}',
    ):
        with pytest.raises(ValidationError):
            model.model_validate_json(bad, strict=True)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}},
        {"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}]}}},
        {"type": "object", "properties": {"x": {"type": ["string", "integer"]}}},
        {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {}}}}},
    ],
)
def test_schemas_it_cannot_hold_to_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        args_model_from_schema("t", schema)


def _remote(name: str, **hints: Any) -> mcp_types.Tool:
    annotations = mcp_types.ToolAnnotations.model_validate(hints) if hints else None
    return mcp_types.Tool(
        name=name, description=f"{name} it", input_schema=SCHEMA, annotations=annotations
    )


def _server(**entry: Any) -> McpServer:
    return McpServer.model_validate({"name": "shop", "url": "http://x/mcp", **entry})


def test_a_listed_tool_becomes_a_tool_with_its_effect_and_why() -> None:
    server = _server(trusted=True, tools={"cancel": {"lookup": "find"}})
    connection = McpConnection(server)
    read, source = build_tool(server, connection, _remote("peek", readOnlyHint=True), 2.0)
    assert (read.name, read.effect, read.timeout_s, read.reconcile) == (
        "shop__peek",
        Effect.READ,
        2.0,
        None,
    )
    assert source == "mcp:shop, read: annotation: readOnlyHint"
    assert read.effect_source == "annotation: readOnlyHint"
    assert read.json_schema()["additionalProperties"] is False
    assert "title" not in read.json_schema()["properties"]["order"]
    write, source = build_tool(server, connection, _remote("cancel", destructiveHint=True), 2.0)
    assert write.effect is Effect.WRITE and write.reconcile is not None
    assert source.endswith("reconciled by lookup find")
    assert "reconciled by lookup find" in write.origin
    registry = ToolRegistry().with_tools([(read, "a"), (write, source)])
    assert "shop__cancel (mcp:shop, write:" in registry.describe()


async def test_a_write_without_a_lookup_stays_unknown_for_a_person() -> None:
    server = _server(trusted=False, prefix="")
    tool, source = build_tool(server, McpConnection(server), _remote("note"), 2.0)
    assert tool.name == "note" and tool.effect is Effect.WRITE
    assert source == (
        "mcp:shop, write: default: untrusted server, annotations ignored; no "
        "lookup: a lost answer waits for a person"
    )
    assert tool.reconcile is not None
    ctx = context_of("r", "c", 1, {"user": "alice"}, session=None)  # type: ignore[arg-type]
    answer = await tool.reconcile(ctx, tool.validate({"order": "a"}), "op_1")
    assert answer == Reconciliation("unknown")


def test_a_new_schema_is_a_new_version() -> None:
    server = _server(trusted=True)
    connection = McpConnection(server)
    one, _ = build_tool(server, connection, _remote("peek", readOnlyHint=True), 2.0)
    changed = _remote("peek", readOnlyHint=True).model_copy(
        update={"input_schema": {**SCHEMA, "required": ["order", "count"]}}
    )
    two, _ = build_tool(server, connection, changed, 2.0)
    assert one.version != two.version


def test_limits_inside_items_or_unions_are_refused_not_dropped() -> None:
    for sub in (
        {"type": "array", "items": {"type": "string", "maxLength": 3}},
        {"anyOf": [{"type": "string", "pattern": "^a"}, {"type": "null"}]},
    ):
        with pytest.raises(SchemaError, match="limits inside"):
            args_model_from_schema("t", {"type": "object", "properties": {"x": sub}})


def test_up_and_dev_take_the_servers_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = tmp_path / "mcp.json"
    servers.write_text('[{"name": "shop", "url": "http://127.0.0.1:8000/mcp", "trusted": true}]')
    parser = build_parser()
    for command in ("up", "dev"):
        args = parser.parse_args([command, "--mcp", str(servers)])
        assert json.loads(mcp_env(args.mcp)["CALLGATE_MCP_SERVERS"]) == [
            {"name": "shop", "url": "http://127.0.0.1:8000/mcp", "trusted": True}
        ]
    assert dev_spec(parser.parse_args(["dev"])).env == {}  # an exported setting stands
    servers.write_text('[{"name": "shop"}]')
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--mcp", str(servers)])
    assert "give exactly one of url" in capsys.readouterr().err
