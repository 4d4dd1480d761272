"""`callgate runs | dead-letters | trace | status | view` list what a real private Redis holds:
runs from the runs index newest first (filtered by status, time, count), dead letters with
where they came from and why, the event log with wall-clock times; tables or ``--json``."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.envelopes import Envelope, TurnRequest, encode
from callgate.errors import CallgateError
from callgate.keys import Keys
from callgate.ops.cli import main
from callgate.streams.worker import Delivery, StreamWorker
from tests.integration.helpers import drain
from tests.integration.test_cli_errors import RUN, deployment

__all__ = ["deployment"]  # fixture


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    assert main(argv) == 0
    return orjson.loads(capsys.readouterr().out)


def _submit(settings: Settings, capsys: pytest.CaptureFixture[str], count: int) -> list[str]:
    run_ids = []
    for n in range(count):
        assert main([*RUN, "--tools", "get_weather", "--input", f"task {n}"]) == 0
        run_ids.append(capsys.readouterr().out.strip())
    asyncio.run(drain(settings))
    return run_ids


def test_runs_lists_the_index_newest_first_with_filters(
    deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _json(["runs", "--json"], capsys) == []
    first, second, third = _submit(deployment, capsys, 3)
    rows = _json(["runs", "--json"], capsys)
    assert isinstance(rows, list)
    assert {r["run_id"] for r in rows} == {first, second, third}
    assert [r["created_ms"] for r in rows] == sorted((r["created_ms"] for r in rows), reverse=True)
    assert {(r["status"], r["user"], r["model"]) for r in rows} == {
        ("awaiting_model", "alice", "m")
    }
    assert _json(["runs", "--json", "--limit", "2"], capsys) == rows[:2]
    assert _json(["runs", "--json", "--status", "completed,failed"], capsys) == []
    assert _json(["runs", "--json", "--status", "awaiting_model", "--since", "1h"], capsys) == rows
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    assert _json(["runs", "--json", "--since", later], capsys) == []

    assert main(["runs"]) == 0
    table = capsys.readouterr().out
    assert "3 run(s)" in table and all(r in table for r in (first, second, third))


def test_trace_status_and_view_for_people_and_as_json(
    deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    [run_id] = _submit(deployment, capsys, 1)
    events = _json(["trace", run_id, "--json"], capsys)
    assert isinstance(events, list) and events[0]["type"] == "run.created"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", events[0]["time"])
    assert main(["trace", run_id, "--full"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["utc", "+time", "event"]
    assert lines[2].startswith(events[0]["time"]) and "→awaiting_model" in lines[2]

    assert main(["status", run_id]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id}" in out and "awaiting_model" in out and "get_weather" in out
    assert main(["view", run_id]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id}: awaiting_model" in out and "0 call(s)" in out
    assert _json(["view", run_id, "--json"], capsys)["calls"] == []  # type: ignore[index]


async def _dead_letter_two(settings: Settings) -> str:
    """One undecodable message and one whose handler refuses it for good, dead-lettered by
    the stream loop itself; returns the refused one's run id."""
    stream = Keys(settings.key_prefix).stream("validate", 0)
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        await redis.xadd(stream, {"d": b"{not json"})
        await redis.xadd(stream, {"d": encode(TurnRequest(run_id="run-doomed", turn=1))})

        async def refuse(envelope: Envelope, delivery: Delivery) -> None:
            raise CallgateError("no such tool at redis://u:pw-123@db:6379")

        worker = StreamWorker(redis, settings, group="validator", streams=[stream], handler=refuse)
        assert await worker.run_burst() == 2
    finally:
        await redis.aclose()
    return "run-doomed"


def test_dead_letters_say_what_and_why(
    deployment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _json(["dead-letters", "--json"], capsys) == []
    run_id = asyncio.run(_dead_letter_two(deployment))
    letters = _json(["dead-letters", "--json"], capsys)
    assert isinstance(letters, list) and len(letters) == 2
    refused, garbled = letters  # newest first
    stream = Keys(deployment.key_prefix).stream("validate", 0)
    assert (refused["stream"], refused["group"], refused["kind"], refused["run_id"]) == (
        stream,
        "validator",
        "turn_request",
        run_id,
    )
    assert refused["reason"].startswith("CallgateError: no such tool")
    assert "pw-123" not in refused["reason"] and "[redacted]" in refused["reason"]
    assert (garbled["kind"], garbled["run_id"]) == (None, None)
    assert "JSON" in garbled["reason"] and garbled["delivery_count"] == 1

    assert main(["dead-letters"]) == 0
    table = capsys.readouterr().out
    assert "2 dead letter(s)" in table and run_id in table and "turn_request" in table
