"""The demo travel service as a real process, driven through the real tools over loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from callgate.errors import ToolError
from callgate.standins.demo.http import ServiceProcess, launch
from callgate.standins.demo.travel import TOOLS, TRAVEL_URL_SETTING, get_train_status, get_weather
from callgate.tools.contract import Identity, Tool, ToolContext
from tests.integration.helpers import reset_session

MODULE = "callgate.standins.demo.travel_service"


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with launch(MODULE) as proc:
        yield proc


@pytest.fixture
async def session(service: ServiceProcess) -> AsyncIterator[aiohttp.ClientSession]:
    async with reset_session(service) as http:
        yield http


async def _run(
    tool: Tool[Any], url: str, http: aiohttp.ClientSession, call_id: str = "c1", **args: str
) -> dict[str, Any]:
    """What the executor does: validate, build the context, enforce the tool's timeout."""
    ctx = ToolContext(
        run_id="r1", call_id=call_id, turn=1, identity=Identity(user="alice"), session=http,
        config={TRAVEL_URL_SETTING: url},
    )  # fmt: skip
    async with asyncio.timeout(tool.timeout_s):
        return await tool.execute(ctx, tool.validate(args), f"op-{call_id}")


async def _admin(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with http.request(method, url, data=orjson.dumps(body) if body else None) as resp:
        return resp.status, await resp.json()


async def test_listens_on_a_free_port(service: ServiceProcess) -> None:
    assert service.url.startswith("http://127.0.0.1:")
    assert int(service.url.rsplit(":", 1)[1]) > 0
    assert [t.name for t in TOOLS] == ["get_train_status", "get_weather"]


async def test_tools_return_the_demo_data_and_stats_count(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    url = service.url
    g = await _run(get_train_status, url, session, "c1", train_number="G1234", date="2026-12-20")
    assert (g["status"], g["delay_min"]) == ("on_time", 0)
    d = await _run(get_train_status, url, session, "c2", train_number="D567", date="2026-12-20")
    assert (d["status"], d["delay_min"]) == ("delayed", 25)
    await _run(get_train_status, url, session, "c3", train_number="G1234", date="2026-12-20")
    w = await _run(get_weather, url, session, "c4", city="Hangzhou", date="2026-12-20")
    assert w["city"] == "Hangzhou" and "condition" in w
    with pytest.raises(ToolError, match="no such train"):
        await _run(get_train_status, url, session, "c5", train_number="G9", date="2026-12-20")

    _, stats = await _admin(session, "GET", f"{url}/_stats")
    trains = stats["train_status"]
    assert (trains["requests"], trains["executed"]) == (4, 4)
    assert trains["by_args"]['{"date":"2026-12-20","train_number":"G1234"}'] == 2
    assert trains["by_args"]['{"date":"2026-12-20","train_number":"D567"}'] == 1
    assert trains["by_call"] == {"c1": 1, "c2": 1, "c3": 1, "c5": 1}
    assert stats["weather"]["executed"] == 1


async def test_configured_latency_takes_effect(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    status, _ = await _admin(
        session, "POST", f"{service.url}/_config", {"weather": {"delay_s": 0.3}}
    )
    assert status == 200
    started = time.monotonic()
    await _run(get_weather, service.url, session, city="Shanghai", date="2026-12-20")
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    await _run(get_train_status, service.url, session, train_number="G1234", date="2026-12-20")
    assert time.monotonic() - started < 0.3  # per endpoint: trains are not slowed


async def test_timeout_failure_is_cut_off_by_the_tool_timeout(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    config = {"weather": {"fail": "timeout", "hang_s": 1.0}}
    await _admin(session, "POST", f"{service.url}/_config", config)
    ctx = ToolContext(
        run_id="r1", call_id="c1", turn=1, identity=Identity(user="bob"), session=session,
        config={TRAVEL_URL_SETTING: service.url},
    )  # fmt: skip
    args = get_weather.validate({"city": "Hangzhou", "date": "2026-12-20"})
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(get_weather.execute(ctx, args, "op-1"), 0.3)
    assert time.monotonic() - started < 0.9
    _, stats = await _admin(session, "GET", f"{service.url}/_stats")
    assert (stats["weather"]["requests"], stats["weather"]["executed"]) == (1, 0)


async def test_500_failure_and_fail_times(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    await _admin(session, "POST", f"{service.url}/_config", {"train_status": {"fail": "500"}})
    with pytest.raises(aiohttp.ClientResponseError) as info:
        await _run(get_train_status, service.url, session, train_number="G1234", date="2026-12-20")
    assert info.value.status == 500  # transient: an aiohttp error, not a ToolError
    config = {"train_status": {"fail": "500", "fail_times": 1}}
    await _admin(session, "POST", f"{service.url}/_config", config)
    with pytest.raises(aiohttp.ClientResponseError):
        await _run(get_train_status, service.url, session, train_number="G1234", date="2026-12-20")
    ok = await _run(get_train_status, service.url, session, train_number="G1234", date="2026-12-20")
    assert ok["status"] == "on_time"  # the injected failure is used up
    _, stats = await _admin(session, "GET", f"{service.url}/_stats")
    assert (stats["train_status"]["requests"], stats["train_status"]["executed"]) == (3, 1)


async def test_bad_config_is_refused(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    bodies: list[dict[str, Any]] = [
        {"nope": {}},
        {"weather": {"fail": "sometimes"}},
        {"weather": {"delay": 1}},
    ]
    for body in bodies:
        status, reply = await _admin(session, "POST", f"{service.url}/_config", body)
        assert status == 400 and "error" in reply
    _, config = await _admin(session, "GET", f"{service.url}/_config")
    assert config["weather"]["fail"] is None


async def test_config_at_start_and_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    initial = orjson.dumps({"weather": {"delay_s": 0.2}}).decode()
    with launch(MODULE, args=["--config", initial]) as proc:
        monkeypatch.setenv(TRAVEL_URL_SETTING, proc.url)  # no config: the tool reads the env
        async with aiohttp.ClientSession() as http:
            ctx = ToolContext(
                run_id="r", call_id="c", turn=1, identity=Identity(user="x"), session=http
            )
            started = time.monotonic()
            args = get_weather.validate({"city": "Shanghai", "date": "2026-12-20"})
            assert (await get_weather.execute(ctx, args, "op"))["condition"] == "cloudy"
            assert time.monotonic() - started >= 0.2
        proc.stop()
        assert proc.proc.returncode == 0  # SIGTERM is a clean shutdown


async def test_counts_per_run_and_config_scoped_to_one_run(
    service: ServiceProcess, session: aiohttp.ClientSession
) -> None:
    url = service.url
    status, _ = await _admin(
        session, "POST", f"{url}/_config?run_id=slow-run", {"weather": {"delay_s": 0.4}}
    )
    assert status == 200

    async def weather(run_id: str) -> float:
        ctx = ToolContext(
            run_id=run_id, call_id="c1", turn=1, identity=Identity(user="bob"), session=session,
            config={TRAVEL_URL_SETTING: url},
        )  # fmt: skip
        args = get_weather.validate({"city": "Hangzhou", "date": "2026-12-20"})
        started = time.monotonic()
        await get_weather.execute(ctx, args, "op")
        return time.monotonic() - started

    assert await weather("slow-run") >= 0.4
    assert await weather("other-run") < 0.4  # another run does not see that config
    await weather("other-run")
    _, slow = await _admin(session, "GET", f"{url}/_stats/runs/slow-run")
    _, other = await _admin(session, "GET", f"{url}/_stats/runs/other-run")
    _, none = await _admin(session, "GET", f"{url}/_stats/runs/never-seen")
    assert (slow, other, none) == (
        {"requests": {"weather": 1}}, {"requests": {"weather": 2}}, {"requests": {}},
    )  # fmt: skip
    _, config = await _admin(session, "GET", f"{url}/_config")
    assert config["weather"]["delay_s"] == 0  # the global config is untouched
