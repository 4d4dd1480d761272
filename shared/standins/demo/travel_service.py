"""The demo travel service: a real HTTP process behind the demo read tools.

    python -m callgate.standins.demo.travel_service --port 0     # prints "listening on http://…"

Endpoints the tools call: ``GET /train_status?train_number=&date=`` and
``GET /weather?city=&date=`` (404 ``{"error": …}`` for unknown data).

Test and operator endpoints:

* ``POST /_config`` ``{"weather": {"delay_s": 0.3, "fail": "timeout" | "500" | null,
  "fail_times": 2, "hang_s": 30}}`` — merged per endpoint.  ``fail: "500"`` answers 500;
  ``"timeout"`` holds the request ``hang_s`` then answers 504, so the caller's timeout fires
  first.  ``fail_times`` limits the failure to the next N requests.  The same JSON can be
  given at start with ``--config`` or ``CALLGATE_TRAVEL_CONFIG``.  ``GET /_config`` shows it.
  With ``?run_id=R`` the config applies only to requests of run R (``X-Callgate-Run-Id``),
  which then ignore the global one — so cases running at once do not disturb each other.
* ``GET /_stats`` — per endpoint: ``requests`` received, ``executed`` (reached the data
  lookup, i.e. not failed by injection), and executions ``by_args`` (canonical JSON of the
  query) and ``by_call`` (the ``X-Callgate-Call-Id`` header).
* ``GET /_stats/runs/{run_id}`` — ``{"requests": {endpoint: n}}`` for one run: what
  conformance counts as that run's executions.
* ``POST /_reset`` — clears config and stats.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from callgate.standins.demo.http import (
    CALL_ID_HEADER,
    RunTally,
    add_bookkeeping,
    configure_from,
    json_error,
    run_id_of,
    run_service,
    service_parser,
)
from callgate.tools.canonical import canonical_json

DATE = "2026-12-20"
TRAINS: dict[tuple[str, str], dict[str, Any]] = {
    ("G1234", DATE): {
        "from": "Shanghai Hongqiao", "to": "Hangzhou East", "departure": "08:00",
        "status": "on_time", "delay_min": 0,
    },
    ("D567", DATE): {
        "from": "Hangzhou East", "to": "Shanghai Hongqiao", "departure": "09:30",
        "status": "delayed", "delay_min": 25,
    },
}  # fmt: skip
WEATHER: dict[tuple[str, str], dict[str, Any]] = {
    ("Hangzhou", DATE): {"condition": "light rain", "low_c": 4, "high_c": 9},
    ("Shanghai", DATE): {"condition": "cloudy", "low_c": 5, "high_c": 10},
}
ENDPOINTS = ("train_status", "weather")
CONFIG_ENV = "CALLGATE_TRAVEL_CONFIG"
DEFAULT_PORT = 8765
"""The tools' default URL; the booking service has 8766."""


class EndpointConfig(BaseModel):
    """Injected latency and failure for one endpoint."""

    model_config = ConfigDict(extra="forbid")

    delay_s: float = Field(default=0.0, ge=0, le=60)
    fail: Literal["timeout", "500"] | None = None
    fail_times: int | None = Field(default=None, ge=1)
    """Fail only the next N requests (None: every request while ``fail`` is set)."""
    hang_s: float = Field(default=30.0, ge=0, le=600)


@dataclass
class EndpointStats:
    requests: int = 0
    executed: int = 0
    by_args: Counter[str] = field(default_factory=Counter)
    by_call: Counter[str] = field(default_factory=Counter)


def _default_config() -> dict[str, EndpointConfig]:
    return {name: EndpointConfig() for name in ENDPOINTS}


@dataclass
class TravelState:
    config: dict[str, EndpointConfig] = field(default_factory=_default_config)
    run_config: dict[str, dict[str, EndpointConfig]] = field(default_factory=dict)
    """Config of single runs (by run id), used instead of ``config`` for their requests."""
    stats: dict[str, EndpointStats] = field(
        default_factory=lambda: {name: EndpointStats() for name in ENDPOINTS}
    )
    runs: RunTally = field(default_factory=RunTally)

    def reset(self) -> None:
        fresh = TravelState()
        self.config, self.run_config, self.stats = fresh.config, fresh.run_config, fresh.stats
        self.runs.clear()

    def config_for(self, run_id: str | None) -> dict[str, EndpointConfig]:
        if run_id is not None and run_id in self.run_config:
            return self.run_config[run_id]
        return self.config

    def configure(self, update: Any, run_id: str | None = None) -> None:
        """Merge ``{endpoint: {field: value}}`` into the global config, or run ``run_id``'s;
        raises ValueError/ValidationError when wrong, having changed nothing."""
        if not isinstance(update, dict) or not set(update) <= set(ENDPOINTS):
            raise ValueError(f"config must be an object with keys among {ENDPOINTS}")
        current = self.config if run_id is None else self.run_config.get(run_id, _default_config())
        merged = dict(current)
        for name, fields in update.items():
            if not isinstance(fields, dict):
                raise ValueError(f"config for {name} must be an object")
            merged[name] = EndpointConfig.model_validate({**current[name].model_dump(), **fields})
        if run_id is None:
            self.config = merged
        else:
            self.run_config[run_id] = merged


STATE = web.AppKey("travel_state", TravelState)


async def _inject(state: TravelState, endpoint: str, run_id: str | None) -> web.Response | None:
    """Apply the endpoint's delay and failure; a response means "fail with this"."""
    config = state.config_for(run_id)
    cfg = config[endpoint]
    if cfg.delay_s:
        await asyncio.sleep(cfg.delay_s)
    if cfg.fail is None:
        return None
    if cfg.fail_times is not None:
        remaining = cfg.fail_times - 1
        config[endpoint] = cfg.model_copy(
            update={"fail_times": remaining or None, "fail": cfg.fail if remaining else None}
        )
    if cfg.fail == "timeout":
        await asyncio.sleep(cfg.hang_s)
        return json_error(504, "injected timeout")
    return json_error(500, "injected server error")


async def _lookup(
    request: web.Request,
    endpoint: str,
    params: tuple[str, ...],
    table: dict[tuple[str, str], dict[str, Any]],
    missing: str,
) -> web.Response:
    """The shared shape of both data endpoints: count, inject, look up, count."""
    state = request.app[STATE]
    stats = state.stats[endpoint]
    stats.requests += 1
    run_id = run_id_of(request)
    state.runs.count(run_id, endpoint)
    query = {p: request.query.get(p, "") for p in params}
    if not all(query.values()):
        return json_error(400, f"query parameters required: {', '.join(params)}")
    failure = await _inject(state, endpoint, run_id)
    if failure is not None:
        return failure
    stats.executed += 1
    stats.by_args[canonical_json(query)] += 1
    call_id = request.headers.get(CALL_ID_HEADER)
    if call_id:
        stats.by_call[call_id] += 1
    key = (query[params[0]], query[params[1]])
    if key not in table:
        return json_error(404, missing)
    return web.json_response({**query, **table[key]})


async def train_status(request: web.Request) -> web.Response:
    return await _lookup(request, "train_status", ("train_number", "date"), TRAINS, "no such train")


async def weather(request: web.Request) -> web.Response:
    return await _lookup(request, "weather", ("city", "date"), WEATHER, "no weather data")


async def get_config(request: web.Request) -> web.Response:
    config = request.app[STATE].config_for(request.query.get("run_id"))
    return web.json_response({name: cfg.model_dump() for name, cfg in config.items()})


async def post_config(request: web.Request) -> web.Response:
    refused = await configure_from(request, request.app[STATE].configure)
    if refused is not None:
        return json_error(400, refused)
    return await get_config(request)


async def get_stats(request: web.Request) -> web.Response:
    stats = request.app[STATE].stats
    return web.json_response(
        {
            name: {
                "requests": s.requests,
                "executed": s.executed,
                "by_args": dict(s.by_args),
                "by_call": dict(s.by_call),
            }
            for name, s in stats.items()
        }
    )


async def get_run_stats(request: web.Request) -> web.Response:
    return web.json_response({"requests": request.app[STATE].runs.of(request.match_info["run_id"])})


def make_app(initial_config: str | None = None) -> web.Application:
    """The service as an aiohttp app; ``initial_config`` is the ``/_config`` JSON."""
    app = web.Application()
    state = TravelState()
    if initial_config:
        state.configure(orjson.loads(initial_config))
    app[STATE] = state
    app.router.add_get("/train_status", train_status)
    app.router.add_get("/weather", weather)
    app.router.add_get("/_config", get_config)
    app.router.add_post("/_config", post_config)
    add_bookkeeping(app, stats=get_stats, run_stats=get_run_stats, reset=app[STATE].reset)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("callgate demo travel service", port=DEFAULT_PORT)
    parser.add_argument("--config", default=os.environ.get(CONFIG_ENV))
    args = parser.parse_args(argv)
    run_service(make_app(args.config), args)


if __name__ == "__main__":
    main()
