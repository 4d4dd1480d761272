"""The travel case end to end: real worker processes, real Redis, the official SDKs talking to
the scripted model server, the demo travel service — for each of the three protocols."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.connect import redis_client
from callgate.envelopes import decode
from callgate.keys import Keys
from callgate.ops.conformance.pairing import result_pairs
from callgate.ops.system import LocalSystem, SystemSpec

pytestmark = pytest.mark.slow

APIS = ("openai-responses", "openai-chat", "anthropic-messages")
WORKERS = ("ingress", "model_turn", "validator", "executor")


class Stack:
    def __init__(self, env: dict[str, str], travel_url: str, model_url: str) -> None:
        self.env = env
        self.travel_url = travel_url
        self.model_url = model_url
        self.settings = Settings(redis_url=env["REDIS_URL"], key_prefix=env["CALLGATE_KEY_PREFIX"])

    async def post(self, url: str, body: Any = None) -> Any:
        async with aiohttp.ClientSession() as http, http.post(url, json=body) as reply:
            return await reply.json()

    async def get(self, url: str) -> Any:
        async with aiohttp.ClientSession() as http, http.get(url) as reply:
            return await reply.json()

    async def run(self, api: str, model: str, text: str, **extra: Any) -> dict[str, Any]:
        spec = {
            "api": api,
            "model": model,
            "input": text,
            "identity": {"user": "alice"},
            "allowed_tools": ["get_train_status", "get_weather"],
            "max_turns": 6,
            **extra,
        }
        async with CallgateClient(self.settings) as client:
            run_id = await client.submit(spec)
            await client.wait(run_id, 30)
            return await client.view(run_id)

    async def run_with_slow_weather(self, api: str, delay_s: float, text: str) -> dict[str, Any]:
        """A ``travel-parallel`` run while the weather service answers ``delay_s`` late."""
        await self.post(f"{self.travel_url}/_config", {"weather": {"delay_s": delay_s}})
        try:
            return await self.run(api, "travel-parallel", text)
        finally:
            await self.post(f"{self.travel_url}/_reset")

    async def finished_order(self, run_id: str) -> list[str]:
        async with CallgateClient(self.settings) as client:
            events = await client.events(run_id)
        return [
            e.data["call_id"]
            for e in events
            if e.type == "call.transition" and e.data.get("to") == "succeeded"
        ]

    async def last_request(self, scenario: str) -> dict[str, Any]:
        log = await self.get(f"{self.model_url}/_log")
        bodies: list[dict[str, Any]] = [e["body"] for e in log if e["scenario"] == scenario]
        return bodies[-1]


def start_stack(store_url: str, replicas: int) -> Iterator[Stack]:
    spec = SystemSpec(
        services=("travel",),
        scripted_model=True,
        redis_url=store_url,
        replicas={kind: replicas for kind in WORKERS} | {"reconciler": 0},
        env={"CALLGATE_CLAIM_IDLE_MS": "1000"},
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        yield Stack(system.env, system.urls["travel"], system.urls["model"])


@pytest.fixture(scope="module")
def stack(store_url: str) -> Iterator[Stack]:
    yield from start_stack(store_url, 1)


@pytest.fixture(scope="module")
def replicated(store_url: str) -> Iterator[Stack]:
    yield from start_stack(store_url, 2)


@pytest.mark.parametrize("api", APIS)
async def test_parallel_reads_complete_in_reverse_order_and_pair_by_call_id(
    stack: Stack, api: str
) -> None:
    view = await stack.run_with_slow_weather(api, 0.4, "Train G1234 and Hangzhou weather?")
    assert view["status"] == "completed", view
    calls = {c["tool"]: c for c in view["calls"]}
    assert calls["get_train_status"]["state"] == calls["get_weather"]["state"] == "succeeded"
    # The weather answered last, yet each result is paired with its own call id.
    assert await stack.finished_order(view["run_id"]) == [
        calls["get_train_status"]["call_id"],
        calls["get_weather"]["call_id"],
    ]
    pairs = result_pairs(api, await stack.last_request("travel-parallel"))
    for call in view["calls"]:
        assert orjson.loads(pairs[call["provider_call_id"]]) == call["result"]["payload"]
    assert "on_time" in view["final_text"] and "light rain" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_weather_timeout_gives_an_error_result_and_the_run_completes(
    stack: Stack, api: str
) -> None:
    view = await stack.run_with_slow_weather(api, 5, "Train and weather?")
    assert view["status"] == "completed", view
    calls = {c["tool"]: c for c in view["calls"]}
    assert calls["get_train_status"]["result"]["status"] == "ok"
    assert calls["get_weather"]["state"] == "failed"
    assert calls["get_weather"]["result"]["error"]["code"] == "timeout"
    assert "unavailable" in view["final_text"] and "on_time" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_malformed_and_out_of_scope_trains_are_rejected_and_never_executed(
    stack: Stack, api: str
) -> None:
    before = await stack.get(f"{stack.travel_url}/_stats")
    view = await stack.run(api, "travel-rejected", "Check X99 and D567")
    after = await stack.get(f"{stack.travel_url}/_stats")
    assert view["status"] == "completed", view
    codes = sorted(c["result"]["error"]["code"] for c in view["calls"])
    assert [c["state"] for c in view["calls"]] == ["rejected", "rejected"]
    assert codes == ["invalid_arguments", "not_authorized"]
    assert after["train_status"]["executed"] == before["train_status"]["executed"]


@pytest.mark.parametrize("api", APIS)
async def test_truncated_call_pauses_incomplete_and_executes_nothing(
    stack: Stack, api: str
) -> None:
    view = await stack.run(api, "travel-truncated", "Is G1234 on time?")
    assert view["status"] == "paused_incomplete", view
    assert "max_tokens" in (view["reason"] or "")
    assert view["calls"] == []


@pytest.mark.parametrize("api", APIS)
async def test_turn_budget_hands_off(stack: Stack, api: str) -> None:
    view = await stack.run(api, "travel-loop", "Weather, forever", max_turns=2)
    assert view["status"] == "handed_off", view
    assert view["reason"] == "turn budget reached"
    assert len(view["calls"]) == 2


async def test_two_replicas_of_every_worker_execute_once_and_request_each_turn_once(
    replicated: Stack,
) -> None:
    views = [await replicated.run(api, "travel-parallel", "Train and weather?") for api in APIS]
    assert [v["status"] for v in views] == ["completed"] * 3
    stats = await replicated.get(f"{replicated.travel_url}/_stats")
    for endpoint in ("train_status", "weather"):
        # One run each: three executions in all, never a second one for a call.
        assert stats[endpoint]["requests"] == stats[endpoint]["executed"] == 3, stats[endpoint]
    # Each turn of each run was requested exactly once (the turns stream is the outbox).
    redis = redis_client(replicated.settings.redis_url)
    keys = Keys(replicated.settings.key_prefix, replicated.settings.partitions)
    entries = [entry for turns in keys.streams("turns") for entry in await redis.xrange(turns)]
    await redis.aclose()
    requested = [(m.run_id, m.turn) for m in (decode(f[b"d"]) for _, f in entries)]
    assert sorted(requested) == sorted({(v["run_id"], t) for v in views for t in (1, 2)})
