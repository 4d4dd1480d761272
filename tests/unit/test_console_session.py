"""The console's pure parts: a login link works once and only while fresh, a session cookie is
believed only with its signature and age, a change needs the session's CSRF token, and a run's
timeline redacts what it shows and times each call from its events."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi import Request, Response
from pydantic import SecretStr

from callgate.console.session import COOKIE, Sessions, csrf_ok
from callgate.console.settings import ConsoleSettings
from callgate.console.views import timeline


def request(
    cookie: str | None = None, headers: dict[str, str] | None = None, method: str = "GET"
) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookie is not None:
        raw.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    return Request(
        {
            "type": "http",
            "method": method,
            "path": "/",
            "headers": raw,
            "query_string": b"",
            "scheme": "http",
            "server": ("t", 80),
        }
    )


def sessions(**settings: Any) -> Sessions:
    return Sessions.create(ConsoleSettings(**{"secret": SecretStr("s" * 32), **settings}))


def cookie_of(response: Response) -> str:
    header = response.headers["set-cookie"]
    assert "HttpOnly" in header and "SameSite=strict" in header, header
    return header.split(";")[0].split("=", 1)[1]


def test_a_login_link_works_once_and_only_while_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    desk = sessions(login_ttl_s=60)
    token = desk.issue_link("carol")
    assert desk.redeem("not-the-token") is None
    assert desk.redeem(token) == "carol"
    assert desk.redeem(token) is None, "used once"
    late = desk.issue_link("carol")
    later = time.monotonic() + 61
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert desk.redeem(late) is None, "expired"


def test_a_session_cookie_is_believed_only_when_signed_and_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    desk = sessions()
    response = Response()
    desk.open(response, request(), "carol", "link")
    value = cookie_of(response)
    session = desk.read(request(value))
    assert session is not None and (session.person, session.via) == ("carol", "link")
    assert desk.read(request(value[:-2] + "xx")) is None, "a tampered cookie"
    assert sessions(secret=SecretStr("other" * 8)).read(request(value)) is None, "another key"
    assert sessions(session_ttl_s=60).read(request(value)) is not None
    later = time.time() + 62
    monkeypatch.setattr(time, "time", lambda: later)
    assert sessions(session_ttl_s=60).read(request(value)) is None, "expired"


async def test_a_change_needs_the_sessions_csrf_token() -> None:
    assert await csrf_ok(request(headers={"X-CSRF-Token": "t0k"}, method="POST"), "t0k")
    assert not await csrf_ok(request(headers={"X-CSRF-Token": "other"}, method="POST"), "t0k")
    assert not await csrf_ok(request(method="POST"), "t0k")
    assert not await csrf_ok(request(headers={"X-CSRF-Token": ""}, method="POST"), "")


def test_the_timeline_redacts_and_times_each_call() -> None:
    call = {
        "call_id": "t1.0",
        "turn": 1,
        "arguments": {"city": "Paris", "api_key": "sk-1"},
        "result": {"status": "ok", "payload": {"token": "abc"}},
    }
    view = {"calls": [call], "status": "paused_unknown_outcome"}
    trace = [
        {"id": "1-0", "t_ms": 1000, "type": "call.created", "data": {"call_id": "t1.0"}},
        {"id": "2-0", "t_ms": 1250, "type": "approval.approved", "data": {}},
        {
            "id": "3-0",
            "t_ms": 1500,
            "type": "call.transition",
            "data": {"call_id": "t1.0", "to": "unknown"},
        },
    ]
    shown = timeline(view, trace)
    [(turn, [row])] = shown["turns"]
    assert turn == 1 and row["took_s"] == 0.5
    assert row["arguments"] == {"city": "Paris", "api_key": "[redacted]"}
    assert row["result"]["payload"]["token"] == "[redacted]"
    assert [e["offset_s"] for e in shown["events"]] == [0, 0.25, 0.5]
    assert [e["type"] for e in shown["decisions"]] == ["approval.approved", "call.transition"]
    assert shown["acts"] == ["cancel"]
    assert timeline({**view, "status": "handed_off"}, trace)["acts"] == ["resume"]
