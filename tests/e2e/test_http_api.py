"""The HTTP API end to end: `callgate serve` as its own process in front of real workers, the
scripted model and the demo services, reached over HTTP with bearer tokens.

Each route works for the caller it is for (submit, list, view, cancel, resume, reply, approve,
resolve) and is refused — 401 without a token, with a malformed, expired or foreign one; 403 for
a known caller without the role — with a problem body and the refusal in the run's trace.
A decision relayed by the API is verified by the validator exactly like one from Slack: a forged
one for a person the delegate may not speak for is refused the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from callgate.auth.deployment import signer_of
from callgate.auth.tokens import sign_decision
from callgate.client import CallgateClient
from callgate.decisions.claims import approval_claims
from callgate.decisions.desk import ApprovalDesk
from callgate.envelopes import new_id
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from callgate.ops.trace import wall_clock
from tests.e2e.api_server import API_ENV, MORE_TRUST, api_deployment, auth, bad_tokens
from tests.e2e.people import TRAVEL, connected, http, status, until

pytestmark = pytest.mark.slow

LOST_AND_INCONCLUSIVE = {
    "reserve": {"mode": "commit_then_drop", "count": 1},
    "lookup": {"mode": "lookup_unknown"},
}


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis, callgate_home: Path) -> Iterator[LocalSystem]:
    services = ("travel", "booking")
    yield from api_deployment(redis_server, callgate_home, services, API_ENV, MORE_TRUST)


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking",)) as c:
        yield c


@pytest.fixture
async def api(system: LocalSystem) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=system.urls["api"], timeout=20) as c:
        yield c


def spec(model: str, tools: list[str], user: str = "alice", **extra: Any) -> dict[str, Any]:
    return {
        "api": "openai-chat",
        "model": model,
        "input": "go",
        "identity": {"user": user},
        "allowed_tools": tools,
        **extra,
    }


async def start(system: LocalSystem, api: httpx.AsyncClient, body: dict[str, Any]) -> str:
    answer = await api.post("/runs", json=body, headers=auth(system, "local"))
    assert answer.status_code == 202, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


async def attacked(
    system: LocalSystem,
    api: httpx.AsyncClient,
    method: str,
    path: str,
    body: Any = None,
    as_whom: str = "carol",
) -> None:
    """Every unverifiable caller gets a 401 problem saying what to do, never a traceback."""
    for kind, headers in bad_tokens(system, as_whom).items():
        answer = await api.request(method, path, json=body, headers=headers)
        assert answer.status_code == 401, (kind, answer.text)
        problem = answer.json()
        assert answer.headers["content-type"] == "application/problem+json"
        assert problem["status"] == 401 and "bearer token" in problem["detail"], kind
        assert "Traceback" not in answer.text


async def forbidden(
    system: LocalSystem, api: httpx.AsyncClient, path: str, whom: str, body: Any = None
) -> str:
    answer = await api.post(path, json=body, headers=auth(system, whom))
    assert answer.status_code == 403, answer.text
    detail: str = answer.json()["detail"]
    return detail


async def event_types(client: CallgateClient, run_id: str) -> list[str]:
    return [e.type for e in await client.events(run_id)]


async def test_submit_is_idempotent_and_refuses_the_wrong_callers(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    body = spec("final-answer", [], run_id=f"run-http-{new_id()}")
    await attacked(system, api, "POST", "/runs", body, as_whom="local")
    said = await forbidden(system, api, "/runs", "carol", body)
    assert "submitting service" in said
    assert "may not vouch for user 'alice'" in await forbidden(system, api, "/runs", "narrow", body)
    run_id = await start(system, api, body)
    await until(client, run_id, status("completed"))
    again = await api.post("/runs", json=body, headers=auth(system, "local"))
    assert (again.status_code, again.json()) == (200, {"run_id": run_id, "created": False})
    other = await api.post(
        "/runs", json={**body, "input": "something else"}, headers=auth(system, "local")
    )
    assert other.status_code == 409 and "another spec" in other.json()["detail"]
    bad = await api.post(
        "/runs", json={**body, "tool_modules": ["os"]}, headers=auth(system, "local")
    )
    assert bad.status_code == 422 and "Traceback" not in bad.text
    assert (await client.view(run_id))["final_text"] == "The capital of PotatoLand is Potato City."


async def test_list_pages_by_cursor_and_view_shows_the_calls(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    user = f"lister-{new_id()[:6]}"
    ids = [await start(system, api, spec("final-answer", [], user=user)) for _ in range(3)]
    for run_id in ids:
        await until(client, run_id, status("completed"))
    await attacked(system, api, "GET", f"/runs?user={user}")
    seen: list[str] = []
    cursor = None
    while True:
        query: dict[str, Any] = {"user": user, "limit": 2}
        if cursor is not None:
            query["cursor"] = cursor
        page = (await api.get("/runs", params=query, headers=auth(system, "carol"))).json()
        seen += [row["run_id"] for row in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        # A run started between two pages is newer than the cursor: it neither shifts the
        # next page (no run twice) nor shows up in it.
        later = await start(system, api, spec("final-answer", [], user=user))
    assert sorted(seen) == sorted(ids) and len(seen) == 3, "each run once, the later one not"
    await until(client, later, status("completed"))
    done = await api.get(
        "/runs",
        params={"user": user, "status": "completed", "limit": 10},
        headers=auth(system, "carol"),
    )
    rows = [row["run_id"] for row in done.json()["runs"]]
    assert rows[0] == later and sorted(rows[1:]) == sorted(ids), "newest first"
    run = await client.ledger.get_run(later)
    assert run is not None
    for query, wanted in (
        ({"until": wall_clock(run.created_ms - 1)}, sorted(ids)),
        ({"since": wall_clock(run.created_ms)}, [later]),
        ({"tool": "reserve_seat"}, []),
    ):
        found = await api.get(
            "/runs", params={"user": user, **query}, headers=auth(system, "carol")
        )
        assert sorted(row["run_id"] for row in found.json()["runs"]) == wanted, query
    none = await api.get(
        "/runs", params={"user": user, "status": "failed"}, headers=auth(system, "carol")
    )
    assert none.json() == {"runs": [], "next_cursor": None}
    bad = await api.get("/runs", params={"status": "nope"}, headers=auth(system, "carol"))
    assert bad.status_code == 422 and "status:" in bad.json()["detail"]
    await attacked(system, api, "GET", f"/runs/{ids[0]}")
    narrow = await api.get(f"/runs/{ids[0]}", headers=auth(system, "narrow"))
    assert narrow.status_code == 403 and "may not read this run" in narrow.json()["detail"]
    hidden = await api.get("/runs", params={"user": user}, headers=auth(system, "narrow"))
    assert hidden.json()["runs"] == [], "a service lists only the runs its grants cover"
    assert "api.forbidden" in await event_types(client, ids[0])
    view = (await api.get(f"/runs/{ids[0]}", headers=auth(system, "carol"))).json()
    assert (view["run_id"], view["status"], view["calls"]) == (ids[0], "completed", [])
    missing = await api.get("/runs/run-nope", headers=auth(system, "carol"))
    assert missing.status_code == 404


async def test_approve_through_the_api_as_the_person_with_the_role(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    run_id = await start(system, api, spec("conf-reserve", ["reserve_seat"]))
    await until(client, run_id, status("paused_approval"))
    inbox = (await api.get("/inbox", headers=auth(system, "carol"))).json()
    [item] = [a for a in inbox["approvals"] if a["run_id"] == run_id]
    assert item["tool"] == "reserve_seat" and item["approver_role"] == "events-lead"
    assert item["arguments"]["participant_id"] == "p-alice"
    bobs = (await api.get("/inbox", headers=auth(system, "bob"))).json()
    assert [a for a in bobs["approvals"] if a["run_id"] == run_id] == []
    path = f"/approvals/{item['approval_id']}/approve"
    await attacked(system, api, "POST", path)
    assert "does not hold the role events-lead" in await forbidden(system, api, path, "bob")
    assert "submitting service" in await forbidden(system, api, path, "local")
    types = await event_types(client, run_id)
    assert "api.unauthenticated" in types and "api.forbidden" in types
    answer = await api.post(path, json={"reason": "ok"}, headers=auth(system, "carol"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["applied"] is True and answer.json()["event"] == "approval.approved"
    view = await until(client, run_id, status("completed"))
    assert view["calls"][0]["state"] == "succeeded"
    record = await client.ledger.get_approval(run_id, item["approval_id"])
    assert record is not None and (record.decided_by, record.signed_by) == ("carol", "api")


async def test_a_relayed_decision_is_verified_like_slacks_and_a_denial_applies(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    """dave holds no events-lead role, and the api delegate may not speak for him at all: the
    door says 403; a decision forged onto the stream with the api key for him is refused by
    the validator with the same reason as one forged with the Slack bot's key for bob.  carol's
    denial through the API then applies."""
    run_id = await start(system, api, spec("conf-reserve", ["reserve_seat"]))
    await until(client, run_id, status("paused_approval"))
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.approval_id is not None
    path = f"/approvals/{call.approval_id}/approve"
    assert "dave does not hold the role" in await forbidden(system, api, path, "dave")
    record = await client.ledger.get_approval(run_id, call.approval_id)
    assert record is not None
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    verdicts = {}
    for delegate, person in (("api", "dave"), ("slack", "bob")):
        after = await desk.last_event_id(run_id)
        jti = new_id()
        claims = approval_claims(
            "approve",
            run=run_id,
            apr=record.approval_id,
            call=record.call_id,
            hash=record.args_hash,
            reason=None,
            jti=jti,
        )
        forged = sign_decision(signer_of(system.settings, delegate), person=person, claims=claims)
        message = await desk.post_signed(run_id, record.turn, forged, jti)
        verdicts[delegate] = await desk.wait_outcome(message, after, 10)
    assert verdicts["api"] is not None and verdicts["slack"] is not None
    assert (verdicts["api"].applied, verdicts["api"].reason) == (False, "api may not sign for dave")
    assert (verdicts["slack"].applied, verdicts["slack"].reason) == (
        False,
        "slack may not sign for bob",
    )
    assert (await client.view(run_id))["status"] == "paused_approval"
    denied = await api.post(
        path.replace("/approve", "/deny"),
        json={"reason": "not today"},
        headers=auth(system, "carol"),
    )
    assert denied.status_code == 200 and denied.json()["event"] == "approval.denied"
    view = await until(client, run_id, lambda v: v["calls"][0]["state"] == "denied")
    assert "not today" in (view["calls"][0]["reason"] or "")


async def test_cancel_and_resume_need_the_runs_user_or_an_operator(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    paused = await start(system, api, spec("conf-reserve", ["reserve_seat"]))
    truncated = await start(system, api, spec("truncated-once", TRAVEL))
    await until(client, paused, status("paused_approval"))
    await until(client, truncated, status("paused_incomplete"))
    for run_id, act in ((paused, "cancel"), (truncated, "resume")):
        await attacked(system, api, "POST", f"/runs/{run_id}/{act}")
        said = await forbidden(system, api, f"/runs/{run_id}/{act}", "bob")
        assert "neither the run's user nor holds the role operator" in said
        assert "api.forbidden" in await event_types(client, run_id)
    cancelled = await api.post(
        f"/runs/{paused}/cancel", json={"reason": "changed plans"}, headers=auth(system, "alice")
    )
    assert cancelled.status_code == 200 and cancelled.json()["event"] == "run.cancelled"
    assert (await client.view(paused))["status"] == "cancelled"
    again = await api.post(f"/runs/{paused}/cancel", headers=auth(system, "operator"))
    assert again.status_code == 409 and "has ended" in again.json()["detail"]
    resumed = await api.post(f"/runs/{truncated}/resume", json={}, headers=auth(system, "alice"))
    assert resumed.status_code == 200 and resumed.json()["event"] == "run.resumed"
    await until(client, truncated, status("completed"))


async def test_reply_is_a_submitting_services_within_its_grants(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    run_id = await start(system, api, spec("final-answer", []))
    await until(client, run_id, status("completed"))
    path = f"/runs/{run_id}/reply"
    await attacked(system, api, "POST", path, {"input": "more?"}, as_whom="local")
    assert "a reply is sent by a submitting service" in await forbidden(
        system, api, path, "alice", {"input": "more?"}
    )
    answer = await api.post(path, json={"input": "And then?"}, headers=auth(system, "local"))
    assert answer.status_code == 200 and answer.json()["admitted"] is True, answer.text
    assert "run.reply" in await event_types(client, run_id)


async def test_resolve_an_unknown_outcome_through_the_api(
    system: LocalSystem, api: httpx.AsyncClient, client: CallgateClient
) -> None:
    await http(system, "booking", "POST", "/_faults", LOST_AND_INCONCLUSIVE)
    run_id = await start(system, api, spec("conf-reserve", ["reserve_seat"]))
    await until(client, run_id, status("paused_approval"))
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None
    approved = await api.post(
        f"/approvals/{call.approval_id}/approve", headers=auth(system, "carol")
    )
    assert approved.status_code == 200, approved.text
    await until(client, run_id, status("paused_unknown_outcome"))
    inbox = (await api.get("/inbox", headers=auth(system, "carol"))).json()
    assert [c["call_id"] for c in inbox["unresolved"] if c["run_id"] == run_id] == ["t1.0"]
    path = f"/runs/{run_id}/calls/t1.0/resolve"
    body = {"outcome": "applied", "result": {"reservation_id": "r-http"}}
    await attacked(system, api, "POST", path, body)
    assert "resolver roles" in await forbidden(system, api, path, "bob", body)
    answer = await api.post(path, json=body, headers=auth(system, "carol"))
    assert answer.status_code == 200 and answer.json()["event"] == "call.resolved", answer.text
    view = await until(client, run_id, status("completed"))
    assert "r-http" in view["final_text"]
    stats = await http(system, "booking", "GET", "/_stats")
    assert stats["reserve"]["requests"] == 1, "nothing replayed"
