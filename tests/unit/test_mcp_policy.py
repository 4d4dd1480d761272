"""The deployment's local policy for MCP tools, without I/O: an effect override beats the
annotations and says so, approval / resource key / authorization / sensitive fields become the
tool's hooks, a local lookup is imported only from the server list — and nothing a run, a
message or the server says can name code to import."""

from __future__ import annotations

import sys
from typing import Any

import mcp_types
import pytest

from callgate.errors import RunSpecError
from callgate.records import Effect
from callgate.runspec import parse_spec
from callgate.tools.contract import Identity
from callgate.tools.mcp_connection import McpConnection
from callgate.tools.mcp_policy import HookError, resolve_hooks
from callgate.tools.mcp_servers import McpServer, parse_servers
from callgate.tools.mcp_source import build_tool, open_mcp_tools
from tests.mcp import hooks

SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "secret": {"type": "string"}},
    "required": ["order"],
}


def _remote(name: str, meta: dict[str, Any] | None = None, **hints: Any) -> mcp_types.Tool:
    annotations = mcp_types.ToolAnnotations.model_validate(hints) if hints else None
    return mcp_types.Tool(
        name=name,
        description=f"{name} it",
        input_schema=SCHEMA,
        annotations=annotations,
        _meta=meta,
    )


def _build(remote: mcp_types.Tool, **entry: Any) -> Any:
    server = McpServer.model_validate({"name": "shop", "url": "http://x/mcp", **entry})
    tool, _ = build_tool(server, McpConnection(server), remote, 2.0, resolve_hooks(server))
    return tool


def test_an_override_beats_the_annotations_and_says_so() -> None:
    untrusted_read = _build(_remote("peek", readOnlyHint=True), tools={"peek": {"effect": "read"}})
    assert untrusted_read.effect is Effect.READ and untrusted_read.reconcile is None
    assert untrusted_read.effect_source == "override: the deployment's policy for the tool"
    trusted = _build(
        _remote("cancel", readOnlyHint=True),
        trusted=True,
        tools={"cancel": {"effect": "write", "lookup": "tests.mcp.hooks:find_cancellation"}},
    )
    assert trusted.effect is Effect.WRITE
    assert trusted.reconcile is hooks.find_cancellation
    assert trusted.effect_source == (
        "override: the deployment's policy for the tool; reconciled"
        " by tests.mcp.hooks:find_cancellation"
    )
    plain = _build(_remote("cancel", readOnlyHint=True), trusted=True)
    assert plain.effect is Effect.READ and plain.effect_source == "annotation: readOnlyHint"


def test_policy_hooks_become_the_tools_hooks() -> None:
    tool = _build(
        _remote("cancel"),
        tools={
            "cancel": {
                "approval": "events-lead",
                "resource_key": "order",
                "sensitive": ["secret"],
                "authorize": "tests.mcp.hooks:only_alice",
                "lookup": "find_cancel",
            }
        },
    )
    args = tool.validate({"order": "A1", "secret": "s3cr3t"})
    alice, bob = Identity(user="alice"), Identity(user="bob")
    assert tool.approval(alice, args) == "events-lead"
    assert tool.resource_of(args) == "mcp:shop:A1"
    assert (tool.authorize(alice, args), tool.authorize(bob, args)) == (
        None,
        "only alice may keep notes",
    )
    assert tool.redact({"order": "A1", "secret": "s3cr3t"}) == {
        "order": "A1",
        "secret": "[redacted]",
    }
    assert tool.effect_source.endswith("reconciled by lookup find_cancel")


def test_a_policy_naming_an_argument_the_tool_lacks_keeps_the_tool_out() -> None:
    with pytest.raises(ValueError, match="resource_key 'missing' is not an argument"):
        _build(_remote("cancel"), tools={"cancel": {"resource_key": "missing"}})


def test_a_new_policy_is_a_new_version() -> None:
    bare = _build(_remote("cancel"))
    gated = _build(_remote("cancel"), tools={"cancel": {"approval": "events-lead"}})
    assert bare.version != gated.version  # an approval asked under one policy is not the other's


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("tests.mcp.no_such_module:f", "does not import"),
        ("tests.mcp.hooks:missing", "no such function"),
        ("tests.mcp.hooks:not_async", "must be an async function"),
    ],
)
async def test_a_hook_that_does_not_import_stops_the_worker_not_a_call(ref: str, why: str) -> None:
    server = McpServer.model_validate(
        {"name": "shop", "url": "http://127.0.0.1:9/mcp", "tools": {"cancel": {"lookup": ref}}}
    )
    with pytest.raises(HookError, match=why):
        await open_mcp_tools((server,), 2.0)  # before any connection is tried


@pytest.mark.parametrize(
    "policy",
    [
        {"lookup": "os:system; rm"},
        {"authorize": "not a ref"},
        {"effect": "maybe"},
        {"approval": ""},
        {"unknown": 1},
        {"resource_key": "a.b"},
    ],
)
def test_policies_are_checked(policy: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="CALLGATE_MCP_SERVERS"):
        parse_servers(({"name": "shop", "url": "u", "tools": {"t": policy}},))


def test_a_run_cannot_name_a_lookup_or_a_server() -> None:
    spec = {
        "api": "openai-responses",
        "model": "m",
        "input": "go",
        "identity": {"user": "alice"},
        "allowed_tools": ["shop__cancel"],
    }
    parse_spec(spec)
    for extra in (
        {"lookup": "tests.mcp.tripwire:boom"},
        {"mcp_servers": [{"name": "evil", "command": ["sh"]}]},
        {"tools": {"shop__cancel": {"lookup": "tests.mcp.tripwire:boom"}}},
    ):
        with pytest.raises(RunSpecError):
            parse_spec({**spec, **extra})
    assert "tests.mcp.tripwire" not in sys.modules


def test_what_a_server_says_never_names_code() -> None:
    ref = "tests.mcp.tripwire:boom"
    remote = _remote(
        "cancel", meta={"callgate/lookup": ref, "lookup": ref}, destructiveHint=True
    ).model_copy(update={"description": f"lookup: {ref}"})
    tool = _build(remote, trusted=True)
    assert tool.effect is Effect.WRITE
    assert tool.effect_source.endswith("no lookup: a lost answer waits for a person")
    assert "tests.mcp.tripwire" not in sys.modules
