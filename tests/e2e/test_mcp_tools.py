"""Tools from MCP servers, end to end: real worker processes, real Redis, the scripted model, and
real MCP servers built with the `mcp` SDK (tests/mcp/server.py) in their own processes — one
over Streamable HTTP (trusted, with a lookup for its destructive tool), one over stdio
(untrusted, started by each worker), each with some local policy from the deployment — and the
same two once more the other way round (a trusted stdio server with a lookup, the HTTP one
registered again as untrusted), so reads in parallel, reconciliation through a lookup and the
untrusted hint are each shown over both transports.  What the servers did is read from their
own record."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.ops.trace import as_json
from callgate.records import Effect, Event
from tests.e2e.people import approve, status, until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "mcp" / "server.py"
SCENARIOS = ROOT / "tests" / "mcp" / "scenarios"
APIS = ("openai-responses", "openai-chat", "anthropic-messages")
API = APIS[0]


class McpHttpServer:
    """The Streamable HTTP server as a child process, stoppable and restartable on its port."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.state), "http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise TimeoutError("the MCP server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:  # its server waits for open listen streams (every worker holds one) to end
                self.process.wait(2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def events(self) -> list[dict[str, Any]]:
        return _events(self.state)


def _events(state: Path) -> list[dict[str, Any]]:
    """What an MCP server recorded doing (every process started on ``state``)."""
    path = state / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


class Deployment:
    def __init__(
        self, system: LocalSystem, shop: McpHttpServer, stdio_state: Path, trusted_stdio_state: Path
    ) -> None:
        self.system = system
        self.shop = shop
        self.stdio_state = stdio_state
        self.trusted_stdio_state = trusted_stdio_state

    def server_events(self, transport: str) -> list[dict[str, Any]]:
        """What the trusted server over ``transport`` (``http`` or ``stdio``) recorded."""
        return self.shop.events() if transport == "http" else _events(self.trusted_stdio_state)

    async def run(self, scenario: str, tools: list[str], api: str = API) -> dict[str, Any]:
        spec = {
            "api": api,
            "model": scenario,
            "input": "Go.",
            "identity": {"user": "alice"},
            "allowed_tools": tools,
            "max_turns": 4,
        }
        async with CallgateClient(self.system.settings) as client:
            run_id = await client.submit(spec)
            await client.wait(run_id, 30)
            return await client.view(run_id)

    async def call_and_events(self, view: dict[str, Any]) -> tuple[Any, list[Event]]:
        [call] = view["calls"]
        async with CallgateClient(self.system.settings) as client:
            record = await client.ledger.get_call(view["run_id"], call["call_id"])
            return record, await client.events(view["run_id"])


@pytest.fixture(scope="module")
def deployment(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    shop_state, stdio_state = tmp_path_factory.mktemp("shop"), tmp_path_factory.mktemp("local")
    trusted_stdio_state = tmp_path_factory.mktemp("tlocal")
    shop = McpHttpServer(shop_state)
    shop.start()
    servers = [
        {
            "name": "shop",
            "url": shop.url,
            "trusted": True,
            "timeout_s": 1.5,
            "tools": {
                "cancel_order": {"lookup": "find_cancellation"},
                "set_price": {"approval": "events-lead", "resource_key": "item"},
            },
        },
        {
            "name": "local",
            "command": [sys.executable, str(SERVER), str(stdio_state), "stdio"],
            "trusted": False,
            "prefix": "local__",
            "timeout_s": 1.5,
            "tools": {"set_status": {"effect": "idempotent_write"}},
        },
        {
            "name": "tlocal",
            "command": [sys.executable, str(SERVER), str(trusted_stdio_state), "stdio"],
            "trusted": True,
            "timeout_s": 1.5,
            "tools": {"cancel_order": {"lookup": "find_cancellation"}},
        },
        {"name": "shopu", "url": shop.url, "trusted": False, "timeout_s": 1.5},
    ]
    spec = SystemSpec(
        services=(),
        scripted_model=True,
        redis_url=redis_server.url,
        tool_modules=(),
        scenarios=(SCENARIOS,),
        grace_s=3.0,
        env={
            "CALLGATE_MCP_SERVERS": json.dumps(servers),
            "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6]",
        },
    )
    try:
        with LocalSystem(spec) as system:
            yield Deployment(system, shop, stdio_state, trusted_stdio_state)
    finally:
        shop.stop()


def _states(events: list[Event], call_id: str) -> list[Any]:
    return [
        e.data["to"]
        for e in events
        if e.type == "call.transition" and e.data.get("call_id") == call_id
    ]


READS = [(api, "http", f"mcp-reads-{api}", "shop__forecast", api) for api in APIS]
READS.append((API, "stdio", "mcp-reads-stdio", "tlocal__forecast", "stdio"))


@pytest.mark.parametrize(("api", "transport", "scenario", "tool", "tag"), READS)
async def test_two_reads_run_in_parallel(
    deployment: Deployment, api: str, transport: str, scenario: str, tool: str, tag: str
) -> None:
    view = await deployment.run(scenario, [tool], api)
    assert view["status"] == "completed", view
    assert [c["result"]["payload"] for c in view["calls"]] == [
        {"city": f"Paris {tag}", "sky": "clear"},
        {"city": f"Rome {tag}", "sky": "clear"},
    ]
    marks = [
        e
        for e in deployment.server_events(transport)
        if e.get("tool") == "forecast" and e["city"] in (f"Paris {tag}", f"Rome {tag}")
    ]
    starts = [e["t"] for e in marks if e["event"] == "start"]
    ends = [e["t"] for e in marks if e["event"] == "end"]
    assert len(starts) == len(ends) == 2
    assert max(starts) < min(ends)  # the second began before the first ended


async def test_an_unannotated_tool_is_a_write(deployment: Deployment) -> None:
    view = await deployment.run("mcp-note", ["shop__note"])
    assert view["status"] == "completed", view
    record, _ = await deployment.call_and_events(view)
    assert record.effect is Effect.WRITE and record.operation_id
    assert view["calls"][0]["result"]["payload"] == {"noted": "restock tea"}


async def test_an_idempotent_tool_gets_the_operation_id_in_meta(deployment: Deployment) -> None:
    view = await deployment.run("mcp-status", ["shop__set_status"])
    assert view["status"] == "completed", view
    record, _ = await deployment.call_and_events(view)
    assert record.effect is Effect.IDEMPOTENT_WRITE
    assert view["calls"][0]["result"]["payload"] == {
        "status": "open",
        "operation_id": record.operation_id,
    }


CANCELS = [(api, "http", "mcp-cancel", "shop__cancel_order") for api in APIS]
CANCELS.append((API, "stdio", "mcp-cancel-stdio", "tlocal__cancel_order"))


@pytest.mark.parametrize(("api", "transport", "scenario", "tool"), CANCELS)
async def test_a_destructive_call_whose_answer_is_lost_is_reconciled_not_resent(
    deployment: Deployment, api: str, transport: str, scenario: str, tool: str
) -> None:
    view = await deployment.run(scenario, [tool], api)
    assert view["status"] == "completed", view
    record, events = await deployment.call_and_events(view)
    assert record.effect is Effect.WRITE
    assert _states(events, record.call_id) == [
        "allowed",
        "executing",
        "unknown",
        "reconciling",
        "succeeded",
    ]
    assert view["calls"][0]["result"]["payload"] == {"cancelled": "slow"}
    mine = [
        e
        for e in deployment.server_events(transport)
        if e.get("operation_id") == record.operation_id
    ]
    assert [e["event"] for e in mine if e.get("tool") == "cancel_order"] == ["commit"]
    assert any(e["event"] == "lookup" and e["found"] for e in mine)


async def test_a_lost_answer_without_a_lookup_waits_for_a_person(deployment: Deployment) -> None:
    view = await deployment.run("mcp-cancel-unlooked", ["local__cancel_order"])
    assert view["status"] == "paused_unknown_outcome", view
    record, events = await deployment.call_and_events(view)
    assert record.effect is Effect.WRITE
    assert _states(events, record.call_id) == [
        "allowed",
        "executing",
        "unknown",
        "reconciling",
        "unresolved",
    ]
    commits = [
        e for e in _events(deployment.stdio_state) if e.get("operation_id") == record.operation_id
    ]
    assert [e["event"] for e in commits] == ["commit"]  # sent once, never again


@pytest.mark.parametrize(
    ("scenario", "tool"),
    [("mcp-untrusted", "local__forecast"), ("mcp-untrusted-http", "shopu__forecast")],
)
async def test_an_untrusted_servers_read_only_hint_is_not_believed(
    deployment: Deployment, scenario: str, tool: str
) -> None:
    view = await deployment.run(scenario, [tool])
    assert view["status"] == "completed", view
    record, _ = await deployment.call_and_events(view)
    assert record.effect is Effect.WRITE  # readOnlyHint: true, but the server is not trusted
    assert view["calls"][0]["effect"] == "write"  # as `callgate view --json` shows it
    assert record.effect_source == (
        "default: untrusted server, annotations ignored; no lookup: "
        "a lost answer waits for a person"
    )
    assert view["calls"][0]["result"]["payload"] == {"city": "Oslo", "sky": "clear"}


async def test_a_server_down_is_a_tool_error_and_its_restart_is_reconnected(
    deployment: Deployment,
) -> None:
    deployment.shop.stop()
    try:
        view = await deployment.run("mcp-one-read", ["shop__forecast"])
        assert view["status"] == "completed", view  # the model was told, the run went on
        [call] = view["calls"]
        assert call["state"] == "failed"
        assert call["result"]["error"]["code"] == "unavailable"
    finally:
        deployment.shop.start()
    view = await deployment.run("mcp-one-read", ["shop__forecast"])
    assert view["status"] == "completed", view
    assert view["calls"][0]["result"]["payload"] == {"city": "Lima", "sky": "clear"}


async def test_the_deployments_override_decides_the_effect_and_the_log_says_so(
    deployment: Deployment,
) -> None:
    view = await deployment.run("mcp-local-status", ["local__set_status"])
    assert view["status"] == "completed", view
    record, events = await deployment.call_and_events(view)
    assert record.effect is Effect.IDEMPOTENT_WRITE  # the untrusted server's hint alone is not
    assert view["calls"][0]["result"]["payload"] == {
        "status": "closed",
        "operation_id": record.operation_id,
    }
    [decided] = [
        e["data"]
        for e in as_json(events)  # as `callgate trace --json` shows it
        if e["type"] == "call.transition" and e["data"]["to"] == "allowed"
    ]
    assert (decided["effect"], decided["effect_source"]) == (
        "idempotent_write",
        "override: the deployment's policy for the tool",
    )


async def test_a_changed_tool_does_not_run_under_the_approval_of_its_old_version(
    deployment: Deployment,
) -> None:
    """The attack: a server changes what a tool does (same arguments, a new description) while
    a call of it waits for a person; the approval is for the tool the person saw, so the call
    must not run under it."""
    async with CallgateClient(deployment.system.settings) as client:
        run_id = await client.submit(
            {
                "api": API,
                "model": "mcp-price",
                "input": "Go.",
                "identity": {"user": "alice"},
                "max_turns": 4,
                "allowed_tools": ["shop__set_price"],
            }
        )
        view = await until(client, run_id, status("paused_approval"))
        record = await client.ledger.get_call(run_id, view["calls"][0]["call_id"])
        assert record is not None and record.resource_key == "mcp:shop:tea"
        async with Client(deployment.shop.url) as mcp_client:
            await mcp_client.call_tool("evolve", {"with_currency": False})
        await _until_changed(deployment.system)
        await approve(deployment.system, client, run_id)
        view = await until(client, run_id, status("completed", "failed", "handed_off"))
    assert view["status"] == "completed", view
    [call] = view["calls"]
    assert call["result"]["error"]["code"] == "approval_mismatch", call
    assert "the tool changed from version" in call["result"]["error"]["message"]
    assert not [e for e in deployment.shop.events() if e.get("tool") == "set_price"]


async def _until_changed(system: LocalSystem) -> None:
    """Until every worker has rebuilt the shop's tools from the changed list: its count of
    list requests the server saw says only that they were asked for, not yet applied."""
    for name in [name for names in system.workers.values() for name in names]:
        await asyncio.to_thread(
            system.supervisor.wait_for_line, name, r"mcp tools changed.*shop", 15
        )
