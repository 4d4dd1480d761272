"""A write whose outcome stayed unknown, resolved from Slack, end to end: real workers, the booking
service, the scripted model, the Slack bot process and the fake Slack Web API process.

The reservation's answer is lost and every lookup is inconclusive, so the run pauses
``paused_unknown_outcome`` and the bot posts the notice with Applied / Not applied / Recheck.
An unmapped Slack user's click is refused by the bot and posts nothing; a mapped person without a
resolver role is refused by the validator (and told so); carol's Applied completes the run, and
the booking service holds exactly the one reservation its first request made: nothing replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from callgate.client import CallgateClient
from callgate.errors import NotFoundError
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.slack.bot import EVENTS_PATH
from callgate.slack.messages import ACTIONS_BLOCK, APPROVE_ACTION, RESOLVE_ACTIONS, RESOLVE_BLOCK
from tests import slack_clicks

pytestmark = pytest.mark.slow

TOKEN = "xoxb-e2e-bot-token-5151"
SECRET = "e2e-signing-secret-77c0"
CHANNEL = "C0APPROVALS"
APPROVERS = {
    "U123": {"user": "carol", "roles": ["events-lead"]},
    "U456": {"user": "dave", "roles": ["finance"]},
}
APPLIED = next(iter(RESOLVE_ACTIONS))
LOST_AND_INCONCLUSIVE = {
    "reserve": {"mode": "commit_then_drop", "count": 1},
    "lookup": {"mode": "lookup_unknown"},
}


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    spec = SystemSpec(
        services=("booking",),
        scripted_model=True,
        redis_url=redis_server.url,
        env={"CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.2, 0.4]"},
        grace_s=3.0,
    )
    with LocalSystem(spec) as running:
        running.start_slack(TOKEN, SECRET, CHANNEL, APPROVERS)
        yield running


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    await booking(system, "POST", "/_reset")
    async with CallgateClient(system.settings) as c:
        yield c


async def get_json(url: str, method: str = "GET", body: Any = None) -> Any:
    async with aiohttp.ClientSession() as http, http.request(method, url, json=body) as reply:
        return await reply.json()


async def booking(system: LocalSystem, method: str, path: str, body: Any = None) -> Any:
    return await get_json(f"{system.urls['booking']}{path}", method, body)


async def until(client: CallgateClient, run_id: str, status: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        with contextlib.suppress(NotFoundError):  # ingress has not created it yet
            view = await client.view(run_id)
            return view if view.get("status") == status else None
        return None

    found: dict[str, Any] = await eventually(probe, f"run {run_id} {status}", 30)
    return found


async def slack_calls(system: LocalSystem, method: str) -> list[dict[str, Any]]:
    """What the bot called on the fake Slack Web API."""
    calls: list[dict[str, Any]] = (await get_json(f"{system.urls['slack']}/_calls"))["calls"]
    return [c for c in calls if c["method"] == method]


async def eventually(probe: Callable[[], Any], what: str, timeout_s: float = 20) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := await probe()):
        assert time.monotonic() < deadline, f"never saw {what}"
        await asyncio.sleep(0.05)
    return found


async def posted(system: LocalSystem, block_id: str, run_id: str) -> dict[str, Any]:
    """The bot's message whose buttons are in ``block_id`` for ``run_id``, as Slack stores it."""

    async def probe() -> dict[str, Any] | None:
        for call in await slack_calls(system, "chat.postMessage"):
            blocks = call["args"].get("blocks") or []
            if any(b.get("block_id") == block_id for b in blocks) and run_id in str(blocks):
                return {"type": "message", "ts": "1700000000.000400", "blocks": blocks}
        return None

    found: dict[str, Any] = await eventually(probe, f"a {block_id} message")
    return found


async def click(system: LocalSystem, message: dict[str, Any], user: str, action_id: str) -> None:
    value = slack_clicks.button_value(message, action_id)
    body = slack_clicks.click_body(message, user, action_id, value, CHANNEL)
    url = f"{system.urls['slack_approvals']}{EVENTS_PATH}"
    assert await slack_clicks.send_click(url, body, SECRET) == 200


async def told(system: LocalSystem, user: str, said: str) -> None:
    async def probe() -> bool:
        return any(
            c["args"]["user"] == user and said in c["args"]["text"]
            for c in await slack_calls(system, "chat.postEphemeral")
        )

    await eventually(probe, f"{user} told {said!r}")


async def test_applied_from_slack_completes_with_one_reservation(
    system: LocalSystem, client: CallgateClient
) -> None:
    await booking(system, "POST", "/_faults", LOST_AND_INCONCLUSIVE)
    run_id = await client.submit(
        {
            "api": "openai-chat",
            "model": "conf-reserve",
            "input": "book",
            "identity": {"user": "alice"},
            "allowed_tools": ["reserve_seat"],
        }
    )
    await until(client, run_id, "paused_approval")
    await click(system, await posted(system, ACTIONS_BLOCK, run_id), "U123", APPROVE_ACTION)
    await until(client, run_id, "paused_unknown_outcome")
    notice = await posted(system, RESOLVE_BLOCK, run_id)
    decisions = client.keys.run_stream("decisions", run_id)
    before = await client.redis.xlen(decisions)

    await click(system, notice, "U999", APPLIED)
    await told(system, "U999", "not mapped to a callgate person")
    assert await client.redis.xlen(decisions) == before, "a refused click posts nothing"
    await click(system, notice, "U456", APPLIED)
    await told(system, "U456", "callgate refused it: dave holds none of the resolver roles")
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.state == "unresolved"
    updates = await slack_calls(system, "chat.update")
    assert [u["args"]["text"] for u in updates] == ["approved by carol"], "no verdict shown yet"

    await click(system, notice, "U123", APPLIED)
    view = await until(client, run_id, "completed")
    assert view["calls"][0]["reason"] == "applied, confirmed by carol"
    stats = await booking(system, "GET", "/_stats")
    assert stats["reserve"]["requests"] == 1, "nothing replayed"
    assert stats["reservations_by_participant"] == {"ws-200/p-alice": 1}

    async def shown() -> list[dict[str, Any]]:
        return [
            u
            for u in await slack_calls(system, "chat.update")
            if u["args"]["text"] == "applied, confirmed by carol"
        ]

    (update,) = await eventually(shown, "the verdict on the message")
    assert all(b["type"] != "actions" for b in update["args"]["blocks"])
    types = [e.type for e in await client.events(run_id)]
    assert (types.count("call.resolved"), types.count("resolve.refused")) == (1, 1)
