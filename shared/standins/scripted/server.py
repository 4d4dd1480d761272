"""The aiohttp app: routes, strict history checks, step choice, fault injection, request log.

Per request: parse → the API's request-level checks → scenario by `model` (unknown → the API's
own not-found) → the API's history rules (400 with the exact body) → step by conversation →
attempt number → faults → render. Transport faults act on the socket itself: `drop` closes it
mid-body so the client sees an incomplete chunked read, exactly like a lost connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from callgate.standins.scripted.common import ApiError, Turn
from callgate.standins.scripted.history import Conversation
from callgate.standins.scripted.recorded import recorded_turn
from callgate.standins.scripted.scenario import (
    AttemptCounter,
    Fault,
    Scenario,
    ScenarioError,
    build_turn,
    load_scenario,
    select_step,
)
from callgate.standins.scripted.wires import ANTHROPIC, CHAT, RESPONSES, WireFormat

log = logging.getLogger("callgate.scripted_model")

LOG_LIMIT = 10_000
"""Requests kept in the log (oldest dropped first): a long-running server must not grow
without bound, and a test or benchmark reads only its recent requests."""


@dataclass
class _Plan:
    """What a request will be answered with, decided before any byte is written."""

    error: ApiError | None = None
    scenario: Scenario | None = None
    step: int | None = None
    faults: tuple[Fault, ...] = ()
    conversation: Conversation | None = None

    def fault(self, kind: str) -> Fault | None:
        return next((f for f in self.faults if f.type == kind), None)


class ScriptedApp:
    """State of one server: scenario sources, attempt counters and the request log."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.extra: dict[str, Scenario] = {}
        self.counter = AttemptCounter()
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_LIMIT)

    def build(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/responses", self._route(RESPONSES))
        app.router.add_post("/v1/chat/completions", self._route(CHAT))
        app.router.add_post("/v1/messages", self._route(ANTHROPIC))
        app.router.add_get("/_log", self._get_log)
        app.router.add_post("/_reset", self._reset)
        return app

    def reset(self) -> None:
        self.log.clear()
        self.counter.reset()

    async def _get_log(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(list(self.log)), content_type="application/json")

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.Response(body=b'{"ok":true}', content_type="application/json")

    def _route(self, wire: WireFormat) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._handle(request, wire)

        return handler

    def _scenario(self, name: str) -> Scenario | None:
        return self.extra.get(name) or load_scenario(name, self.dirs)

    def plan(self, wire: WireFormat, body: dict[str, Any]) -> _Plan:
        """What ``body`` will be answered with: an error, or a scenario step and its faults."""
        err = wire.validate(body)
        if err is not None:
            return _Plan(err)
        model = str(body["model"])
        try:
            scenario = self._scenario(model)
        except ScenarioError as exc:
            return _Plan(wire.invalid(f"scripted model: {exc}"))
        if scenario is None:
            return _Plan(wire.not_found(model))
        violation = wire.check(body)
        if violation is not None:
            return _Plan(wire.bad_request(violation), scenario)
        conv = wire.conversation(body)
        step = select_step(scenario, conv)
        if step is None:
            msg = (
                f"scripted model: no step of scenario '{model}' matches this conversation "
                f"(assistant_turns={conv.assistant_turns}, "
                f"results={[r.name for r in conv.results]})"
            )
            return _Plan(wire.invalid(msg), scenario)
        attempt = self.counter.next(model, step)
        faults = tuple(f for f in scenario.steps[step].faults() if f.applies(attempt))
        return _Plan(None, scenario, step, faults, conv)

    async def _handle(self, request: web.Request, wire: WireFormat) -> web.StreamResponse:
        received_ns = time.monotonic_ns()
        rid = wire.new_rid()
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError:
            entry: dict[str, Any] = {"path": request.path, "body": None, "status": 400}
            self.log.append(entry)
            return _error_response(
                wire.invalid("We could not parse the JSON body of your request."), wire, rid
            )
        plan = self.plan(wire, body)
        entry = self._logged(request, plan, body, rid, received_ns)
        delay = plan.fault("delay")
        if delay is not None and delay.first_byte_s:
            await asyncio.sleep(delay.first_byte_s)
        err = plan.error or _http_fault(wire, plan, body, entry["stream"])
        if err is not None:
            entry["status"] = err.status
            entry["request_id"] = err.body.get("request_id", rid)
            _log_line(entry)
            return _error_response(err, wire, rid)
        return await self._answer(request, wire, plan, body, rid, entry)

    def _logged(
        self, request: web.Request, plan: _Plan, body: dict[str, Any], rid: str, at_ns: int
    ) -> dict[str, Any]:
        """The request's entry in `/_log`, filled in as it is answered."""
        entry = {
            "path": request.path,
            "scenario": body.get("model"),
            "step": plan.step,
            "step_name": _step_name(plan),
            "faults": [f.type for f in plan.faults],
            "stream": bool(body.get("stream")),
            "status": None,
            "request_id": rid,
            "body": body,
            "received_ns": at_ns,
            "answered_ns": None,
        }
        self.log.append(entry)
        return entry

    async def _answer(
        self,
        request: web.Request,
        wire: WireFormat,
        plan: _Plan,
        body: dict[str, Any],
        rid: str,
        entry: dict[str, Any],
    ) -> web.StreamResponse:
        assert plan.scenario is not None and plan.step is not None and plan.conversation
        step = plan.scenario.steps[plan.step]
        model = plan.scenario.model
        if step.recorded is not None:
            turn = recorded_turn(step.recorded, model)
        else:
            turn = build_turn(step, plan.conversation, plan.faults, model)
        entry["status"] = 200
        _log_line(entry)
        if entry["stream"]:
            streamed = await self._stream(request, wire, plan, turn, body, rid, entry)
            # Monotonic, this process only: for the benchmark's model-to-model round trips.
            entry["answered_ns"] = time.monotonic_ns()
            return streamed
        if plan.fault("drop") is not None:
            entry["dropped"] = True
            _drop(request)
            return web.Response(status=200)
        payload = orjson.dumps(wire.render_json(turn, body))
        entry["answered_ns"] = time.monotonic_ns()
        return web.Response(
            body=payload, content_type="application/json", headers=wire.headers(rid)
        )

    async def _stream(
        self,
        request: web.Request,
        wire: WireFormat,
        plan: _Plan,
        turn: Turn,
        body: dict[str, Any],
        rid: str,
        entry: dict[str, Any],
    ) -> web.StreamResponse:
        failing = plan.fault("stream_error")
        events = wire.render_stream(turn, body, failing.after_events if failing else None, failing)
        drop = plan.fault("drop")
        delay = plan.fault("delay")
        gap = delay.event_gap_s if delay else 0.0
        resp = web.StreamResponse(status=200, headers=wire.headers(rid))
        resp.content_type = "text/event-stream"
        resp.charset = "utf-8"
        resp.headers["cache-control"] = "no-cache"
        await resp.prepare(request)
        for n, event in enumerate(events):
            if drop is not None and n >= drop.after_events:
                break
            if n and gap:
                await asyncio.sleep(gap)
            await resp.write(event.encode())
        if drop is not None:
            entry["dropped"] = True  # this request's entry: others may have been logged since
            _drop(request)
            return resp
        await resp.write_eof()
        return resp


def _step_name(plan: _Plan) -> str | None:
    if plan.scenario is None or plan.step is None:
        return None
    return plan.scenario.steps[plan.step].name


def _http_fault(
    wire: WireFormat, plan: _Plan, body: dict[str, Any], stream: bool
) -> ApiError | None:
    for f in plan.faults:
        if f.type == "http_429":
            return wire.rate_limited(f, str(body.get("model")))
        if f.type == "http_500" or (f.type == "stream_error" and not stream):
            return wire.server_error()
        if f.type == "overloaded":
            return wire.overloaded()
    return None


def _error_response(err: ApiError, wire: WireFormat, rid: str) -> web.Response:
    rid = str(err.body.get("request_id", rid))
    headers = {**wire.headers(rid), **err.headers}
    reason = {529: "Overloaded"}.get(err.status)
    return web.Response(
        status=err.status,
        reason=reason,
        body=orjson.dumps(err.body),
        content_type="application/json",
        headers=headers,
    )


def _drop(request: web.Request) -> None:
    """Close the socket: flushed bytes arrive, the body never completes (like a lost peer)."""
    if request.transport is not None:
        request.transport.close()


def _log_line(entry: dict[str, Any]) -> None:
    # Bodies and headers are not logged: they may hold API keys or user data.
    log.info(
        "%s model=%s step=%s faults=%s stream=%s status=%s",
        entry["path"],
        entry["scenario"],
        entry["step"],
        entry["faults"],
        entry["stream"],
        entry["status"],
    )
