"""The workshop case end to end: a write that needs approval, decisions on the approvals
stream, and a write whose answer is lost, settled by the reconciler — never replayed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from shared.client import CallgateClient
from shared.config import Settings
from shared.embedded_redis import EmbeddedRedis
from shared.envelopes import ApprovalDecision, encode
from shared.errors import NotFoundError
from shared.keys import Keys
from shared.store import Ledger
from shared.system import LocalSystem, SystemSpec

APIS = ("openai-responses", "openai-chat", "anthropic-messages")


class Workshop:
    def __init__(self, env: dict[str, str], booking_url: str) -> None:
        self.booking_url = booking_url
        self.settings = Settings(redis_url=env["REDIS_URL"], key_prefix=env["CALLGATE_KEY_PREFIX"])

    async def http(self, method: str, path: str, body: Any = None) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, f"{self.booking_url}{path}", json=body) as reply,
        ):
            return await reply.json()

    async def submit(self, api: str) -> str:
        spec = {
            "api": api,
            "model": "workshop-reserve",
            "input": "Book me into ws-101",
            "identity": {"user": "alice"},
            "tool_modules": ["services.demo.workshop"],
        }
        async with CallgateClient(self.settings) as client:
            return await client.submit(spec)

    async def until(self, run_id: str, *states: str, timeout_s: float = 30) -> dict[str, Any]:
        async with CallgateClient(self.settings) as client:
            view: dict[str, Any] = {"status": "not created"}
            for _ in range(int(timeout_s / 0.05)):
                try:
                    view = await client.view(run_id)
                except NotFoundError:  # ingress has not created it yet
                    await asyncio.sleep(0.05)
                    continue
                if view["status"] in states:
                    return view
                await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} is {view['status']}, not {states}: {view}")

    async def decide(self, view: dict[str, Any], decision: str, approver: str, **kw: Any) -> None:
        client = aioredis.Redis.from_url(self.settings.redis_url)
        keys = Keys(self.settings.key_prefix, self.settings.partitions)
        call = await Ledger(client, keys, self.settings).get_call(view["run_id"], "t1.0")
        assert call is not None and call.approval_id is not None
        message = ApprovalDecision(
            run_id=call.run_id,
            turn=call.turn,
            call_id=call.call_id,
            approval_id=call.approval_id,
            decision=decision,  # type: ignore[arg-type]
            approver=approver,
            args_hash=kw.pop("args_hash", call.args_hash),
            **kw,
        )
        await client.xadd(keys.run_stream("approvals", call.run_id), {"d": encode(message)})
        await client.aclose()


@pytest.fixture(scope="module")
def workshop(redis_server: EmbeddedRedis) -> Iterator[Workshop]:
    spec = SystemSpec(
        services=("booking",),
        scripted_model=True,
        redis_url=redis_server.url,
        env={
            "CALLGATE_APPROVERS": '{"carol": ["events-lead"]}',
            "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6]",
        },
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        yield Workshop(system.env, system.urls["booking"])


@pytest.fixture(autouse=True)
async def fresh_booking(workshop: Workshop) -> None:
    await workshop.http("POST", "/_reset")


@pytest.mark.parametrize("api", APIS)
async def test_approved_write_runs_exactly_once(workshop: Workshop, api: str) -> None:
    run_id = await workshop.submit(api)
    paused = await workshop.until(run_id, "paused_approval")
    assert (await workshop.http("GET", "/_stats"))["reserve"]["requests"] == 0
    await workshop.decide(paused, "deny", "bob")  # lacks the role: refused, nothing changes
    await workshop.decide(paused, "approve", "carol", args_hash="0" * 64)  # other arguments
    await asyncio.sleep(0.5)
    assert (await workshop.until(run_id, "paused_approval"))["status"] == "paused_approval"
    await workshop.decide(paused, "approve", "carol")
    view = await workshop.until(run_id, "completed")
    await workshop.decide(paused, "deny", "carol")  # a second decision changes nothing
    stats = await workshop.http("GET", "/_stats")
    assert stats["reservations_by_participant"] == {"ws-101/p-alice": 1}
    assert view["calls"][0]["state"] == "succeeded"
    assert "p-alice" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_denied_write_never_runs_and_the_model_is_told_why(
    workshop: Workshop, api: str
) -> None:
    run_id = await workshop.submit(api)
    await workshop.decide(
        await workshop.until(run_id, "paused_approval"), "deny", "carol", reason="budget frozen"
    )
    view = await workshop.until(run_id, "completed")
    assert (await workshop.http("GET", "/_stats"))["reserve"]["requests"] == 0
    assert view["calls"][0]["state"] == "denied"
    assert "denied by approver carol: budget frozen" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_lost_answer_is_reconciled_not_replayed(workshop: Workshop, api: str) -> None:
    await workshop.http("POST", "/_faults", {"reserve": {"mode": "commit_then_drop", "count": 1}})
    run_id = await workshop.submit(api)
    await workshop.decide(await workshop.until(run_id, "paused_approval"), "approve", "carol")
    view = await workshop.until(run_id, "completed")
    stats = await workshop.http("GET", "/_stats")
    assert stats["reserve"]["requests"] == 1
    assert stats["reservations_by_participant"] == {"ws-101/p-alice": 1}
    assert view["calls"][0]["state"] == "succeeded"
    assert "reservation_id" in view["final_text"]


async def test_inconclusive_reconciliation_pauses_the_run(workshop: Workshop) -> None:
    await workshop.http(
        "POST",
        "/_faults",
        {"reserve": {"mode": "commit_then_drop", "count": 1}, "lookup": {"mode": "lookup_unknown"}},
    )
    run_id = await workshop.submit("openai-chat")
    await workshop.decide(await workshop.until(run_id, "paused_approval"), "approve", "carol")
    view = await workshop.until(run_id, "paused_unknown_outcome")
    assert view["calls"][0]["state"] == "unresolved"
    assert (await workshop.http("GET", "/_stats"))["reserve"]["requests"] == 1
