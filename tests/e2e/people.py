"""What the people-in-the-loop e2e tests share: a whole deployment, a client of it with its
stand-ins reset, its services over HTTP, waiting on a run's observable state, and carol's
signed approval."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk
from callgate.errors import NotFoundError
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec

APIS = ("openai-responses", "openai-chat", "anthropic-messages")
TRAVEL = ["get_train_status", "get_weather"]
View = dict[str, Any]


def deployment(
    redis_server: EmbeddedRedis,
    services: tuple[str, ...],
    env: Mapping[str, str] | None = None,
    scenarios: tuple[Path, ...] = (),
) -> Iterator[LocalSystem]:
    """Every worker, the scripted model (also playing ``scenarios``' folders) and
    ``services``, on the session's Redis."""
    spec = SystemSpec(
        services=services,
        scripted_model=True,
        redis_url=redis_server.url,
        env=dict(env or {}),
        grace_s=3.0,
        scenarios=scenarios,
    )
    with LocalSystem(spec) as running:
        yield running


@contextlib.asynccontextmanager
async def connected(
    system: LocalSystem, reset: tuple[str, ...] = ()
) -> AsyncIterator[CallgateClient]:
    """A client of ``system``, once the stand-ins named in ``reset`` have forgotten past tests."""
    for service in reset:
        await http(system, service, "POST", "/_reset")
    async with CallgateClient(system.settings) as client:
        yield client


async def http(system: LocalSystem, service: str, method: str, path: str, body: Any = None) -> Any:
    """One request to a stand-in (``booking``, ``travel``, ``model``), its JSON answer."""
    url = f"{system.urls[service]}{path}"
    async with aiohttp.ClientSession() as session, session.request(method, url, json=body) as r:
        return await r.json()


async def submit(
    client: CallgateClient, api: str, model: str, tools: list[str], input: str = "go", **extra: Any
) -> str:
    """Start a run for alice with the scripted ``model``, allowed ``tools``; its run id."""
    return await client.submit(
        {
            "api": api,
            "model": model,
            "input": input,
            "identity": {"user": "alice"},
            "allowed_tools": tools,
            **extra,
        }
    )


async def until(
    client: CallgateClient, run_id: str, done: Callable[[View], bool], timeout_s: float = 30
) -> View:
    """The run's view once ``done`` says so (the run may not exist yet)."""
    deadline = time.monotonic() + timeout_s
    view: View = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFoundError):  # ingress has not created it yet
            view = await client.view(run_id)
        if view and done(view):
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not get there in {timeout_s}s: {view}")


def status(*wanted: str, turns: int = 0) -> Callable[[View], bool]:
    """``done`` for `until`: the run is in one of ``wanted``, at turn ``turns`` or later."""
    return lambda view: view["status"] in wanted and view["turns"] >= turns


async def approve(system: LocalSystem, client: CallgateClient, run_id: str) -> None:
    """carol approves the run's first call, signed with her key."""
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.approval_id is not None
    record = await client.ledger.get_approval(run_id, call.approval_id)
    assert record is not None
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    await desk.post(record, "approve", signer_of(system.settings, "carol"))
