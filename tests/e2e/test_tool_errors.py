"""A tool whose own code raises, end to end: real worker processes, real Redis, the official SDKs
talking to the scripted model server.  A read's exception is that call's error result, which the
model receives under the call's id (read from the request bodies the model server logged); a
write's is an unknown outcome with the exception on record, reconciled, never replayed.  Neither
is a dead letter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as aioredis

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.keys import Keys
from callgate.ops.conformance.pairing import result_pairs
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.records import Event
from callgate.standins.demo.faulty import PLANTED_PASSWORD
from tests.conftest import TEST_TOOLS

pytestmark = pytest.mark.slow

APIS = ("openai-responses", "openai-chat", "anthropic-messages")


class Stack:
    def __init__(self, env: dict[str, str], model_url: str) -> None:
        self.model_url = model_url
        self.settings = Settings(redis_url=env["REDIS_URL"], key_prefix=env["CALLGATE_KEY_PREFIX"])

    async def run(
        self, api: str, scenario: str, tools: list[str]
    ) -> tuple[dict[str, Any], list[Event]]:
        spec = {
            "api": api,
            "model": scenario,
            "input": "Go.",
            "identity": {"user": "alice"},
            "allowed_tools": tools,
            "max_turns": 4,
        }
        async with CallgateClient(self.settings) as client:
            run_id = await client.submit(spec)
            await client.wait(run_id, 30)
            return await client.view(run_id), await client.events(run_id)

    async def last_request(self, scenario: str) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{self.model_url}/_log") as reply:
            log = await reply.json()
        bodies: list[dict[str, Any]] = [e["body"] for e in log if e["scenario"] == scenario]
        return bodies[-1]

    async def dead_letters(self) -> int:
        redis = aioredis.Redis.from_url(self.settings.redis_url)
        try:
            return int(await redis.xlen(Keys(self.settings.key_prefix).dead_letter(0)))
        finally:
            await redis.aclose()


@pytest.fixture(scope="module")
def stack(redis_server: EmbeddedRedis) -> Iterator[Stack]:
    spec = SystemSpec(
        services=(),
        scripted_model=True,
        redis_url=redis_server.url,
        tool_modules=TEST_TOOLS,
        env={"CALLGATE_CLAIM_IDLE_MS": "1000"},
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        yield Stack(system.env, system.urls["model"])


def _moves(events: list[Event], call_id: str) -> list[tuple[Any, Any]]:
    return [
        (e.data["to"], e.data.get("reason"))
        for e in events
        if e.type == "call.transition" and e.data.get("call_id") == call_id
    ]


@pytest.mark.parametrize("api", APIS)
async def test_a_read_that_raises_is_an_error_result_the_model_receives(
    stack: Stack, api: str
) -> None:
    view, events = await stack.run(api, "tool-crash", ["read_fortune"])
    assert view["status"] == "completed", view
    [call] = view["calls"]
    assert call["state"] == "failed" and call["attempts"] == 1
    error = call["result"]["error"]
    assert error["code"] == "tool_error"
    assert error["message"].startswith("RuntimeError: fortune backend crashed")
    assert "redis://fortune:[redacted]@db" in error["message"]

    sent = result_pairs(api, await stack.last_request("tool-crash"))
    assert orjson.loads(sent[call["provider_call_id"]]) == {"error": error}
    everything = orjson.dumps([view, [e.model_dump() for e in events], sent]).decode()
    assert PLANTED_PASSWORD not in everything
    assert await stack.dead_letters() == 0


@pytest.mark.parametrize("api", APIS)
async def test_a_write_that_raises_after_sending_is_reconciled_never_replayed(
    stack: Stack, api: str
) -> None:
    view, events = await stack.run(api, "write-crash", ["send_postcard"])
    assert view["status"] == "completed", view
    [call] = view["calls"]
    moves = _moves(events, call["call_id"])
    assert [to for to, _ in moves] == [
        "allowed",
        "executing",
        "unknown",
        "reconciling",
        "succeeded",
    ]
    reason = dict(moves)["unknown"]
    assert reason.startswith("RuntimeError: printer jammed after postcard op_")
    assert call["attempts"] == 1  # executed once; the reconciler asked, it did not resend
    assert call["result"] == {"status": "ok", "payload": {"postcard": "delivered", "to": "grandma"}}
    sent = result_pairs(api, await stack.last_request("write-crash"))
    assert orjson.loads(sent[call["provider_call_id"]]) == call["result"]["payload"]
    assert await stack.dead_letters() == 0
