"""The run's events over HTTP: as JSON, and as Server-Sent Events that follow the run live and
resume from ``Last-Event-ID`` — a client that drops mid-run and comes back gets every event
exactly once, in order, including those written while it was away.  Meanwhile the approval is
given by a person signed in through an identity provider the trust file lists."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.client import CallgateClient
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from tests.e2e.api_server import API_ENV, IDP, IDP_KEY, MORE_TRUST, api_deployment, auth, idp_token
from tests.e2e.people import connected, status, until

pytestmark = pytest.mark.slow

SSE = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis, callgate_home: Path) -> Iterator[LocalSystem]:
    yield from api_deployment(redis_server, callgate_home, ("booking",), API_ENV, MORE_TRUST)


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking",)) as c:
        yield c


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE frames of ``response`` as {id, event, data}; comments skipped."""
    frame: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "event" in frame or "data" in frame:
                yield frame
            frame = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        frame[name] = value.removeprefix(" ")


async def read_events(
    api: httpx.AsyncClient, path: str, headers: dict[str, str], stop: Any
) -> list[dict[str, str]]:
    """Frames until ``stop(frame)`` says so (the connection is then dropped) or the end."""
    got: list[dict[str, str]] = []
    async with api.stream("GET", path, headers={**SSE, **headers}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for frame in frames(response):
            if frame.get("event") == "end":
                break
            got.append(frame)
            if stop(frame):
                break
    return got


async def test_a_client_that_reconnects_gets_every_event_once_in_order(
    system: LocalSystem, client: CallgateClient
) -> None:
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as api:
        body = {
            "api": "anthropic-messages",
            "model": "conf-reserve",
            "input": "book",
            "identity": {"user": "alice"},
            "allowed_tools": ["reserve_seat"],
        }
        started = await api.post("/runs", json=body, headers=auth(system, "local"))
        run_id = started.json()["run_id"]
        await until(client, run_id, status("paused_approval"))
        path = f"/runs/{run_id}/events"
        refused = await api.get(path, headers=SSE)
        assert refused.status_code == 401

        first = await read_events(
            api, path, auth(system, "carol"), lambda f: f["event"] == "approval.requested"
        )
        assert first and first[-1]["event"] == "approval.requested"
        # Dropped mid-run: what happens now is written while nobody listens.  carol signs in
        # through the identity provider: her roles are the trust file's, not the token's.
        call = await client.ledger.get_call(run_id, "t1.0")
        assert call is not None
        path_approve = f"/approvals/{call.approval_id}/approve"
        bob = {"Authorization": f"Bearer {idp_token(IDP_KEY, IDP, 'bob')}"}
        assert (await api.post(path_approve, headers=bob)).status_code == 403
        mallory = Ed25519PrivateKey.generate()
        forged = {"Authorization": f"Bearer {idp_token(mallory, IDP, 'carol')}"}
        assert (await api.post(path_approve, headers=forged)).status_code == 401
        carol = {"Authorization": f"Bearer {idp_token(IDP_KEY, IDP, 'carol')}"}
        approved = await api.post(path_approve, headers=carol)
        assert approved.status_code == 200, approved.text
        rest = await read_events(
            api, path, {**auth(system, "carol"), "Last-Event-ID": first[-1]["id"]}, lambda f: False
        )

        stored = [e.id for e in await client.events(run_id)]
        received = [f["id"] for f in first + rest]
        # The approval's request shares its step's entry with the transitions after it: the
        # client left in the middle of an entry, and got the rest of it on its return.
        assert rest[0]["id"] == first[-1]["id"] + ".1"
        assert received == stored, "every event once, in order, across the reconnect"
        assert (await client.view(run_id))["status"] == "completed"
        types = [f["event"] for f in rest]
        assert "approval.approved" in types and types[-1] == "run.transition"
        assert orjson.loads(rest[-1]["data"])["data"]["to"] == "completed"

        listed = (await api.get(path, headers=auth(system, "carol"))).json()
        assert [e["id"] for e in listed["events"]] == stored
        after = (
            await api.get(path, params={"after": first[-1]["id"]}, headers=auth(system, "carol"))
        ).json()
        assert [e["id"] for e in after["events"]] == [f["id"] for f in rest]
        bad = await api.get(path, headers={**auth(system, "carol"), "Last-Event-ID": "x"})
        assert bad.status_code == 422


async def test_the_served_openapi_document_and_problems_for_every_mistake(
    system: LocalSystem,
) -> None:
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as api:
        doc = (await api.get("/openapi.json")).json()
        health = await api.get("/healthz")
        metrics = await api.get("/metrics")
        headers = {**auth(system, "local"), "Content-Type": "application/json"}
        mistakes = {
            422: await api.post("/runs", content=b"{not json", headers=headers),
            404: await api.get("/no-such-route", headers=headers),
            405: await api.delete("/runs", headers=headers),
        }
    assert doc["info"]["title"] == "callgate HTTP API"
    assert "/runs/{run_id}/events" in doc["paths"] and health.json() == {"ok": True}
    assert metrics.status_code == 200 and "callgate_runs{" in metrics.text  # mounted, scraped
    for status_code, answer in mistakes.items():
        assert answer.status_code == status_code, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == status_code and "Traceback" not in answer.text
