"""The example agent (examples/notes_agent) end to end, as the README tells a user to run it:
real worker processes that import the example's tool module from ``PYTHONPATH``, its notes
service, the scripted model serving the example's own scenario, a write approved by carol with
`callgate approve`, and a write whose answer is lost settled by the reconciler — each write
made exactly once, as the notes service itself counts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from callgate.auth.keyring import LocalKeyring
from callgate.client import CallgateClient
from callgate.errors import NotFoundError
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from callgate.ops.system import LocalSystem, SystemSpec

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCENARIOS = EXAMPLES / "notes_agent" / "scenarios"
APIS = ("openai-responses", "openai-chat", "anthropic-messages")
NOTE_TEXT = "Door code 4711"
"""Part of the scenario's note text, which the tool marks sensitive."""


class NotesAgent:
    def __init__(self, system: LocalSystem) -> None:
        self.system = system
        self.notes_url = system.urls["notes"]

    async def notes(self, method: str, path: str, body: Any = None) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"{self.notes_url}{path}", json=body) as reply,
        ):
            return await reply.json()

    async def submit(self, api: str, title: str) -> str:
        spec = {
            "api": api,
            "model": "notes-agent",
            "input": title,
            "identity": {"user": "alice"},
            "allowed_tools": ["search_notes", "add_note"],
        }
        async with CallgateClient(self.system.settings) as client:
            return await client.submit(spec)

    async def until(self, run_id: str, *states: str, timeout_s: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {"status": "not created"}
        async with CallgateClient(self.system.settings) as client:
            while time.monotonic() < deadline:
                with contextlib.suppress(NotFoundError):  # not created yet
                    view = await client.view(run_id)
                if view["status"] in states:
                    return view
                await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} is not {states} after {timeout_s}s: {view}")

    def callgate(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The `callgate` command, as a person at this deployment's terminal runs it."""
        return subprocess.run(
            [sys.executable, "-m", "callgate.ops.cli", *args],
            env=self.system.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    async def trace_text(self, run_id: str) -> str:
        async with CallgateClient(self.system.settings) as client:
            events = await client.events(run_id)
        return orjson.dumps([e.model_dump(mode="json") for e in events]).decode()


@pytest.fixture(scope="module")
def agent(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NotesAgent]:
    """The example deployed: its own keyring (carol is an ``editor``), its tools on the
    workers' PYTHONPATH, its notes service and scenarios."""
    home = tmp_path_factory.mktemp("notes-home")
    keyring = LocalKeyring(home)
    keyring.ensure({"carol": ["editor"], "alice": []})
    notes_port, model_port = free_port(), free_port()
    path = [str(EXAMPLES), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {
        "PYTHONPATH": os.pathsep.join(path),
        "CALLGATE_HOME": str(home),
        "CALLGATE_TRUST_FILE": str(keyring.trust_file),
        "NOTES_URL": f"http://127.0.0.1:{notes_port}",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{model_port}",
        "OPENAI_API_KEY": "scripted-local",
        "ANTHROPIC_API_KEY": "scripted-local",
        "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6, 1.2]",
        "CALLGATE_CLAIM_IDLE_MS": "1000",
    }
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        redis_url=redis_server.url,
        tool_modules=("notes_agent.tools",),
        env=env,
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        # The workers ask the model and the service only once a run arrives.
        system.start_listener(
            "model",
            [
                sys.executable,
                "-m",
                "callgate.standins.scripted_model",
                "--port",
                str(model_port),
                "--scenarios",
                str(SCENARIOS),
            ],
        )
        system.start_listener(
            "notes", [sys.executable, "-m", "notes_agent.service", "--port", str(notes_port)]
        )
        yield NotesAgent(system)


@pytest.mark.parametrize("api", APIS)
async def test_a_team_note_waits_for_carol_then_is_written_once(
    agent: NotesAgent, api: str
) -> None:
    title = f"standup {api} {uuid.uuid4().hex[:6]}"
    run_id = await agent.submit(api, title)
    view = await agent.until(run_id, "paused_approval")
    assert [(c["tool"], c["state"]) for c in view["calls"]] == [
        ("search_notes", "succeeded"),
        ("add_note", "needs_approval"),
    ], view
    assert (await agent.notes("GET", "/_stats"))["notes"].get(title) is None

    listed = agent.callgate("approvals", "--json")
    assert listed.returncode == 0, listed.stderr
    [approval] = [a for a in orjson.loads(listed.stdout) if a["run_id"] == run_id]
    decided = agent.callgate("approve", approval["approval_id"], "--as", "carol")
    assert decided.returncode == 0, decided.stdout + decided.stderr

    view = await agent.until(run_id, "completed", "failed", "paused_unknown_outcome")
    assert view["status"] == "completed", view
    [search, add] = view["calls"]
    assert (search["tool"], search["state"]) == ("search_notes", "succeeded")
    assert (add["tool"], add["state"]) == ("add_note", "succeeded")
    assert add["result"]["payload"]["title"] == title
    assert title in view["final_text"]
    stats = await agent.notes("GET", "/_stats")
    assert (stats["write_requests"][title], stats["notes"][title]) == (1, 1)
    assert NOTE_TEXT not in await agent.trace_text(run_id)  # `text` is a sensitive field


async def test_a_lost_answer_is_reconciled_by_operation_id_never_written_again(
    agent: NotesAgent,
) -> None:
    await agent.notes("POST", "/_faults", {"drop_after_commit": 1})
    title = f"standup lost answer {uuid.uuid4().hex[:6]}"
    run_id = await agent.submit("openai-chat", title)
    await agent.until(run_id, "paused_approval")
    [approval] = [
        a
        for a in orjson.loads(agent.callgate("approvals", "--json").stdout)
        if a["run_id"] == run_id
    ]
    assert agent.callgate("approve", approval["approval_id"], "--as", "carol").returncode == 0

    view = await agent.until(run_id, "completed", "failed", "paused_unknown_outcome")
    assert view["status"] == "completed", view
    add = view["calls"][1]
    assert add["state"] == "succeeded" and add["result"]["payload"]["title"] == title
    trace = await agent.trace_text(run_id)
    assert '"unknown"' in trace  # the executor did not know; the reconciler asked the service
    stats = await agent.notes("GET", "/_stats")
    assert (stats["write_requests"][title], stats["notes"][title]) == (1, 1)
