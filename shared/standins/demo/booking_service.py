"""The demo booking service: the authoritative system behind the workshop write tool.

    python -m callgate.standins.demo.booking_service --port 0 [--state FILE]   # "listening on http://…"

It owns the truth about reservations, so recovery asks *it* whether a write happened
(the reconciler).  Data: events ``ws-101`` (2 seats), ``ws-102`` (full: no seats) and ``ws-200``
(1000 seats, so many runs can reserve at once); participants ``p-alice`` and ``p-bob``
(eligible for all) and ``p-carol`` (eligible for none).  With ``--state FILE``
reservations and stats are written to FILE (atomically, before the answer is sent) and read
back at start, so a restart keeps them.

Endpoints the tools call:

* ``GET /events/{event_id}/seats`` → ``{event_id, capacity, reserved, available}``
* ``GET /events/{event_id}/eligibility/{participant_id}`` → ``{…, eligible, reason}``
* ``POST /reservations`` ``{event_id, participant_id}`` with the operation id as the
  ``Idempotency-Key`` header (or ``operation_id`` in the body; both must then agree) → 201
  with the new reservation, or 200 with the existing one when the operation id was seen (same
  arguments);
  409 ``no seats left``, 422 not eligible / operation id reused with other arguments,
  404 unknown event or participant.  Errors are ``{"error": message, "code": code}``.
* ``GET /reservations/{operation_id}`` → 200 with the reservation, 404 when none.

Test endpoints: ``POST /_faults`` / ``GET /_faults`` (see `booking_faults`; ``?run_id=R``
scopes them to one run), ``GET /_stats``, ``GET /_stats/runs/{run_id}`` (one run's requests
per endpoint and reservations created — what conformance counts), ``POST /_reset`` (clears
reservations, stats and faults).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from callgate.standins.demo.booking_faults import Fault, ScopedFaults
from callgate.standins.demo.http import (
    RunTally,
    add_bookkeeping,
    configure_from,
    run_id_of,
    run_service,
    service_parser,
)
from callgate.tools.contract import IDEMPOTENCY_KEY_HEADER

ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
EVENTS: dict[str, dict[str, Any]] = {
    "ws-101": {"title": "Intro to callgate", "capacity": 2},
    "ws-102": {"title": "Callgate internals (full)", "capacity": 0},
    "ws-200": {"title": "Open lab", "capacity": 1000},
}
OPEN = {"ws-101", "ws-102", "ws-200"}
PARTICIPANTS: dict[str, dict[str, Any]] = {
    "p-alice": {"name": "Alice", "eligible_for": OPEN},
    "p-bob": {"name": "Bob", "eligible_for": OPEN},
    "p-carol": {"name": "Carol", "eligible_for": set()},
}
NOT_ELIGIBLE_REASON = "has not completed the prerequisite course"
DEFAULT_PORT = 8766
"""The tools' default URL; the travel service has 8765."""


class ReserveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(pattern=ID_PATTERN)
    participant_id: str = Field(pattern=ID_PATTERN)
    operation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """Or the ``Idempotency-Key`` header (`operation_of`)."""


class Reserve(BaseModel):
    """A reservation request with its operation id, wherever the id came from."""

    event_id: str
    participant_id: str
    operation_id: str = Field(pattern=ID_PATTERN)


@dataclass
class BookingState:
    """Reservations by operation id, plus the counters conformance reads."""

    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    """Requests received per endpoint (including those a fault then broke)."""
    reserve_requests_by_op: Counter[str] = field(default_factory=Counter)
    created_by_op: Counter[str] = field(default_factory=Counter)
    keyed_by_header: Counter[str] = field(default_factory=Counter)
    """Reserve requests whose operation id came as the ``Idempotency-Key`` header."""
    runs: RunTally = field(default_factory=RunTally)
    """Per run (``X-Callgate-Run-Id``): requests per endpoint, and ``created`` reservations."""
    faults: ScopedFaults = field(default_factory=ScopedFaults)
    path: Path | None = None

    def reserved(self, event_id: str) -> int:
        return sum(1 for r in self.reservations.values() if r["event_id"] == event_id)

    def stats(self) -> dict[str, Any]:
        per_participant = Counter(
            f"{r['event_id']}/{r['participant_id']}" for r in self.reservations.values()
        )
        return {
            "requests": dict(self.requests),
            "reserve": {
                "requests": sum(self.reserve_requests_by_op.values()),
                "created": sum(self.created_by_op.values()),
                "requests_by_operation": dict(self.reserve_requests_by_op),
                "created_by_operation": dict(self.created_by_op),
                "idempotency_keys": dict(self.keyed_by_header),
            },
            "reservations": len(self.reservations),
            "reservations_by_participant": dict(per_participant),
        }

    def reset(self) -> None:
        self.reservations.clear()
        self.requests.clear()
        self.reserve_requests_by_op.clear()
        self.created_by_op.clear()
        self.keyed_by_header.clear()
        self.runs.clear()
        self.faults.clear()
        self.save()

    def save(self) -> None:
        """Persist (write-then-rename, so a crash never leaves half a file)."""
        if self.path is None:
            return
        data = {
            "reservations": self.reservations,
            "requests": self.requests,
            "reserve_requests_by_op": self.reserve_requests_by_op,
            "created_by_op": self.created_by_op,
            "keyed_by_header": self.keyed_by_header,
            "runs": self.runs.counts,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(data))
        os.replace(tmp, self.path)

    @classmethod
    def load(cls, path: Path | None) -> BookingState:
        state = cls(path=path)
        if path is not None and path.exists():
            data = orjson.loads(path.read_bytes())
            state.reservations = dict(data["reservations"])
            state.requests = Counter(data["requests"])
            state.reserve_requests_by_op = Counter(data["reserve_requests_by_op"])
            state.created_by_op = Counter(data["created_by_op"])
            state.keyed_by_header = Counter(data.get("keyed_by_header", {}))
            state.runs.counts = {r: Counter(c) for r, c in data.get("runs", {}).items()}
        return state


STATE = web.AppKey("booking_state", BookingState)


def business_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": message, "code": code}, status=status)


def drop(request: web.Request) -> web.Response:
    """Close the connection with no answer; the returned response is never delivered."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500)


async def read_fault(request: web.Request, endpoint: str) -> web.Response | None:
    """Count the request and apply a read endpoint's fault; a response means "answer this"."""
    state = request.app[STATE]
    state.requests[endpoint] += 1
    run_id = run_id_of(request)
    state.runs.count(run_id, endpoint)
    fault = state.faults.take(endpoint, run_id)
    if fault is None:
        return None
    if fault.mode == "slow":
        await asyncio.sleep(fault.delay_s)
        return None
    if fault.mode == "unreachable":
        return drop(request)
    if fault.mode == "reject":
        return business_error(fault.status, "rejected", fault.message)
    return business_error(503, "lookup_unavailable", "reservation lookup temporarily unavailable")


def _event_or_404(event_id: str) -> dict[str, Any] | web.Response:
    event = EVENTS.get(event_id)
    return event if event is not None else business_error(404, "unknown_event", "no such event")


async def seats(request: web.Request) -> web.Response:
    failure = await read_fault(request, "seats")
    if failure is not None:
        return failure
    event_id = request.match_info["event_id"]
    event = _event_or_404(event_id)
    if isinstance(event, web.Response):
        return event
    reserved = request.app[STATE].reserved(event_id)
    capacity = int(event["capacity"])
    return web.json_response(
        {"event_id": event_id, "capacity": capacity, "reserved": reserved,
         "available": max(capacity - reserved, 0)}
    )  # fmt: skip


async def eligibility(request: web.Request) -> web.Response:
    failure = await read_fault(request, "eligibility")
    if failure is not None:
        return failure
    event_id, participant_id = request.match_info["event_id"], request.match_info["participant"]
    event = _event_or_404(event_id)
    if isinstance(event, web.Response):
        return event
    participant = PARTICIPANTS.get(participant_id)
    if participant is None:
        return business_error(404, "unknown_participant", "no such participant")
    eligible = event_id in participant["eligible_for"]
    return web.json_response(
        {"event_id": event_id, "participant_id": participant_id, "eligible": eligible,
         "reason": None if eligible else f"{participant_id} {NOT_ELIGIBLE_REASON}"}
    )  # fmt: skip


def commit(state: BookingState, body: Reserve, run_id: str | None) -> web.Response:
    """Check and create the reservation in one step (no await: nothing interleaves)."""
    existing = state.reservations.get(body.operation_id)
    if existing is not None:
        if (existing["event_id"], existing["participant_id"]) != (
            body.event_id, body.participant_id,
        ):  # fmt: skip
            return business_error(
                422, "operation_conflict", "operation id already used for another reservation"
            )
        return web.json_response(existing, status=200, headers={"X-Booking-Replayed": "true"})
    event = _event_or_404(body.event_id)
    if isinstance(event, web.Response):
        return event
    participant = PARTICIPANTS.get(body.participant_id)
    if participant is None:
        return business_error(404, "unknown_participant", "no such participant")
    if body.event_id not in participant["eligible_for"]:
        message = f"{body.participant_id} {NOT_ELIGIBLE_REASON}"
        return business_error(422, "not_eligible", message)
    if state.reserved(body.event_id) >= int(event["capacity"]):
        return business_error(409, "no_seats", "no seats left")
    reservation = {
        "reservation_id": f"res-{len(state.reservations) + 1:04d}",
        "operation_id": body.operation_id,
        "event_id": body.event_id,
        "participant_id": body.participant_id,
        "status": "confirmed",
    }
    state.reservations[body.operation_id] = reservation
    state.created_by_op[body.operation_id] += 1
    state.runs.count(run_id, "created")
    state.save()
    return web.json_response(reservation, status=201)


def operation_of(request: web.Request, body: ReserveBody) -> Reserve | None:
    """``body`` with its operation id, from the body or the ``Idempotency-Key`` header (None
    when neither has one); `ValueError` when the two disagree, `ValidationError` when the
    header's is not a valid id."""
    key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if key is not None and body.operation_id is not None and key != body.operation_id:
        raise ValueError("the Idempotency-Key header and the body's operation_id differ")
    operation_id = body.operation_id or key
    if operation_id is None:
        return None
    return Reserve.model_validate({**body.model_dump(), "operation_id": operation_id})


async def reserve(request: web.Request) -> web.Response:
    """Commit, with the reserve fault (if any) placed around the commit."""
    state = request.app[STATE]
    state.requests["reserve"] += 1
    run_id = run_id_of(request)
    state.runs.count(run_id, "reserve")
    try:
        body = operation_of(request, ReserveBody.model_validate_json(await request.read()))
    except ValidationError as exc:
        return business_error(400, "bad_request", str(exc.errors(include_url=False)))
    except ValueError as exc:
        return business_error(422, "operation_conflict", str(exc))
    if body is None:
        return business_error(400, "bad_request", "the Idempotency-Key header is required")
    if IDEMPOTENCY_KEY_HEADER in request.headers:
        state.keyed_by_header[body.operation_id] += 1
    state.reserve_requests_by_op[body.operation_id] += 1
    state.save()
    fault: Fault | None = state.faults.take("reserve", run_id)
    if fault is None:
        return commit(state, body, run_id)
    if fault.mode == "unreachable":
        return drop(request)
    if fault.mode == "reject":
        return business_error(fault.status, "rejected", fault.message)
    if fault.mode == "commit_then_drop":
        commit(state, body, run_id)
        return drop(request)
    # slow: the handler keeps running if the caller gives up, so the commit still happens.
    if fault.commit == "after":
        await asyncio.sleep(fault.delay_s)
        return commit(state, body, run_id)
    response = commit(state, body, run_id)
    await asyncio.sleep(fault.delay_s)
    return response


async def lookup(request: web.Request) -> web.Response:
    failure = await read_fault(request, "lookup")
    if failure is not None:
        return failure
    reservation = request.app[STATE].reservations.get(request.match_info["operation_id"])
    if reservation is None:
        return business_error(404, "not_found", "no reservation for this operation id")
    return web.json_response(reservation)


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].faults.describe(request.query.get("run_id")))


async def post_faults(request: web.Request) -> web.Response:
    refused = await configure_from(request, request.app[STATE].faults.configure)
    if refused is not None:
        return business_error(400, "bad_request", refused)
    return await get_faults(request)


async def get_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].stats())


async def get_run_stats(request: web.Request) -> web.Response:
    counts = request.app[STATE].runs.of(request.match_info["run_id"])
    created = counts.pop("created", 0)
    return web.json_response({"requests": counts, "created": created})


def make_app(state_file: str | None = None) -> web.Application:
    """The service as an aiohttp app; ``state_file`` persists reservations across restarts."""
    app = web.Application()
    app[STATE] = BookingState.load(Path(state_file) if state_file else None)
    app.router.add_get("/events/{event_id}/seats", seats)
    app.router.add_get("/events/{event_id}/eligibility/{participant}", eligibility)
    app.router.add_post("/reservations", reserve)
    app.router.add_get("/reservations/{operation_id}", lookup)
    app.router.add_get("/_faults", get_faults)
    app.router.add_post("/_faults", post_faults)
    add_bookkeeping(app, stats=get_stats, run_stats=get_run_stats, reset=app[STATE].reset)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("callgate demo booking service", port=DEFAULT_PORT)
    parser.add_argument("--state", default=None, help="JSON file that keeps reservations")
    args = parser.parse_args(argv)
    run_service(make_app(args.state), args)


if __name__ == "__main__":
    main()
