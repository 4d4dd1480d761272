"""The workshop case end to end, for each protocol: a write that needs a human's approval,
decided by signed Slack clicks (the real bot process against a local fake Slack Web API) or on
the approvals stream as `callgate approve` does; refused decisions that change nothing; an
approval that expires; and writes whose answer is lost — by a dropped connection or a SIGKILLed
executor — settled by the reconciler, never replayed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk, DecisionKind, Outcome
from callgate.decisions.record import ApprovalRecord
from callgate.errors import NotFoundError
from callgate.ops.cli import main
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.slack.messages import APPROVE_ACTION, DENY_ACTION, ButtonValue
from tests import slack_clicks

pytestmark = pytest.mark.slow

APIS = ("openai-responses", "openai-chat", "anthropic-messages")
TOKEN = "xoxb-e2e-bot-token-77"
SECRET = "e2e-signing-secret-5f2a"
CHANNEL = "C0WORKSHOP"
CAROL, BOB = "U0CAROL", "U0BOB"
SLACK_USERS = {CAROL: {"user": "carol", "roles": ["events-lead"]}, BOB: {"user": "bob"}}


class Workshop:
    def __init__(self, system: LocalSystem, slack_url: str, bot_url: str) -> None:
        self.system = system
        self.settings = system.settings
        self.booking_url = system.urls["booking"]
        self.slack_url = slack_url
        self.events_url = f"{bot_url}/slack/events"

    async def http(self, method: str, url: str, body: Any = None) -> Any:
        async with aiohttp.ClientSession() as http, http.request(method, url, json=body) as reply:
            return await reply.json()

    async def booking(self, method: str, path: str, body: Any = None) -> Any:
        return await self.http(method, f"{self.booking_url}{path}", body)

    async def submit(self, api: str, model: str = "workshop-reserve", **extra: Any) -> str:
        spec = {
            "api": api,
            "model": model,
            "input": "Book me into ws-101",
            "identity": {"user": "alice"},
            "allowed_tools": ["check_seats", "check_eligibility", "reserve_seat"],
            **extra,
        }
        async with CallgateClient(self.settings) as client:
            return await client.submit(spec)

    async def submit_approved(self, api: str) -> str:
        """A run whose reservation carol approves (on the stream) once it waits for her."""
        run_id = await self.submit(api)
        await self.until(run_id, "paused_approval")
        await self.decide(run_id, "approve", "carol")
        return run_id

    async def until(self, run_id: str, *states: str, timeout_s: float = 30) -> dict[str, Any]:
        """The run's view once its status is one of ``states``."""
        return await self.poll(run_id, lambda v: v["status"] in states, timeout_s)

    async def until_call(self, run_id: str, state: str, timeout_s: float = 30) -> dict[str, Any]:
        """The run's view once its first call is in ``state``."""
        return await self.poll(
            run_id, lambda v: bool(v["calls"]) and v["calls"][0]["state"] == state, timeout_s
        )

    async def poll(self, run_id: str, done: Any, timeout_s: float) -> dict[str, Any]:
        view: dict[str, Any] = {"status": "not created"}
        deadline = time.monotonic() + timeout_s
        async with CallgateClient(self.settings) as client:
            while time.monotonic() < deadline:
                try:
                    view = await client.view(run_id)
                except NotFoundError:  # ingress has not created it yet
                    view = {"status": "not created"}
                if view["status"] != "not created" and done(view):
                    return view
                await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} did not get there in {timeout_s}s: {view}")

    async def approval(self, client: CallgateClient, run_id: str) -> ApprovalRecord:
        """The approval record of the run's (one) call that needs a human."""
        calls = await client.ledger.get_calls(run_id, await client.ledger.run_call_ids(run_id, 1))
        [approval_id] = [c.approval_id for c in calls if c.approval_id is not None]
        record = await client.ledger.get_approval(run_id, approval_id)
        assert record is not None
        return record

    async def decide(
        self, run_id: str, decision: DecisionKind, approver: str, **kw: Any
    ) -> Outcome | None:
        """Post a decision on the run's approval (as `callgate approve` does); the verdict."""
        async with CallgateClient(self.settings) as client:
            record = await self.approval(client, run_id)
            desk = ApprovalDesk(client.redis, client.keys, client.ledger)
            after = await desk.last_event_id(run_id)
            signer = signer_of(self.settings, approver)  # the approver's own key
            message = await desk.post(record, decision, signer, **kw)
            return await desk.wait_outcome(message, after, 15)

    async def approval_state(self, run_id: str) -> str:
        async with CallgateClient(self.settings) as client:
            return (await self.approval(client, run_id)).state

    async def slack_calls(self, method: str) -> list[dict[str, Any]]:
        calls = (await self.http("GET", f"{self.slack_url}/_calls"))["calls"]
        return [c for c in calls if c["method"] == method]

    async def slack_request(self, run_id: str, timeout_s: float = 15) -> dict[str, Any]:
        """The approval request the bot posted for ``run_id``, as Slack stores the message."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for call in await self.slack_calls("chat.postMessage"):
                blocks = call["args"].get("blocks", [])
                if any(b["type"] == "actions" for b in blocks):
                    message = {
                        "type": "message",
                        "ts": "1700000000.000100",
                        "text": call["args"]["text"],
                        "blocks": blocks,
                    }
                    value = slack_clicks.button_value(message, APPROVE_ACTION)
                    if orjson.loads(value)["run_id"] == run_id:
                        return message
            await asyncio.sleep(0.05)
        raise AssertionError(f"no approval request was posted to Slack for {run_id}")

    async def click(
        self,
        message: dict[str, Any],
        user: str,
        action: str = APPROVE_ACTION,
        *,
        value: str | None = None,
        timestamp: int | None = None,
        signature: str | None = None,
    ) -> int:
        value = value or slack_clicks.button_value(message, action)
        body = slack_clicks.click_body(message, user, action, value, CHANNEL)
        return await slack_clicks.send_click(
            self.events_url, body, SECRET, timestamp=timestamp, signature=signature
        )

    async def ephemerals(self) -> list[str]:
        return [str(c["args"]["text"]) for c in await self.slack_calls("chat.postEphemeral")]


@pytest.fixture(scope="module")
def workshop(store_url: str) -> Iterator[Workshop]:
    spec = SystemSpec(
        services=("booking",),
        scripted_model=True,
        redis_url=store_url,
        env={
            "CALLGATE_APPROVERS": '{"carol": ["events-lead"]}',
            "CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 0.6]",
        },
        grace_s=3.0,
    )
    with LocalSystem(spec) as system:
        slack, bot = system.start_slack(TOKEN, SECRET, CHANNEL, SLACK_USERS)
        yield Workshop(system, slack, bot)


@pytest.fixture(autouse=True)
async def fresh(workshop: Workshop) -> None:
    await workshop.booking("POST", "/_reset")
    await workshop.http("DELETE", f"{workshop.slack_url}/_calls")


async def reserve_requests(workshop: Workshop) -> int:
    return int((await workshop.booking("GET", "/_stats"))["reserve"]["requests"])


async def assert_reserved_once(workshop: Workshop) -> None:
    """One reserve request reached the booking service, and alice holds its one seat."""
    stats = await workshop.booking("GET", "/_stats")
    assert stats["reserve"]["requests"] == 1, "the write was sent once, never again"
    assert stats["reservations_by_participant"] == {"ws-101/p-alice": 1}


@pytest.mark.parametrize("api", APIS)
async def test_signed_slack_approval_reserves_exactly_once(workshop: Workshop, api: str) -> None:
    run_id = await workshop.submit(api)
    await workshop.until(run_id, "paused_approval")
    message = await workshop.slack_request(run_id)
    assert await reserve_requests(workshop) == 0, "nothing runs before the decision"
    assert await workshop.click(message, CAROL) == 200
    view = await workshop.until(run_id, "completed")
    await assert_reserved_once(workshop)
    assert view["calls"][0]["state"] == "succeeded"
    stats = await workshop.booking("GET", "/_stats")  # the call's operation id, as the header
    assert stats["reserve"]["idempotency_keys"] == {view["calls"][0]["operation_id"]: 1}
    assert "p-alice" in view["final_text"]
    [update] = await workshop.slack_calls("chat.update")
    assert update["args"]["text"] == "approved by carol"


@pytest.mark.parametrize("api", APIS)
async def test_refused_decisions_change_nothing(workshop: Workshop, api: str) -> None:
    run_id = await workshop.submit(api)
    await workshop.until(run_id, "paused_approval")
    message = await workshop.slack_request(run_id)
    tampered = ButtonValue.model_validate(
        {**orjson.loads(slack_clicks.button_value(message, APPROVE_ACTION)), "args_hash": "0" * 64}
    ).to_value()

    # Slack refuses before callgate hears of it: bad signature, stale timestamp (401) ...
    assert await workshop.click(message, CAROL, signature="v0=" + "0" * 64) == 401
    assert await workshop.click(message, CAROL, timestamp=int(time.time()) - 600) == 401
    # ... the bot refuses a user without the role and a button for other arguments ...
    assert await workshop.click(message, BOB) == 200
    assert await workshop.click(message, CAROL, value=tampered) == 200
    refusals = await workshop.ephemerals()
    assert any("role 'events-lead'" in r for r in refusals), refusals
    assert any("arguments changed" in r for r in refusals), refusals
    # ... and the validator refuses what reaches the stream without matching.
    other_args = await workshop.decide(run_id, "approve", "carol", args_hash="0" * 64)
    no_role = await workshop.decide(run_id, "approve", "bob")
    assert other_args is not None and not other_args.applied
    assert "different arguments" in str(other_args.reason)
    assert no_role is not None and not no_role.applied
    assert "does not hold the role" in str(no_role.reason)

    still = await workshop.until(run_id, "paused_approval")
    assert still["calls"][0]["state"] == "needs_approval"
    assert await workshop.approval_state(run_id) == "pending"
    assert await reserve_requests(workshop) == 0

    assert await workshop.click(message, CAROL) == 200
    await workshop.until(run_id, "completed")
    # A second decision, by click or on the stream, changes nothing either.
    assert await workshop.click(message, CAROL, DENY_ACTION) == 200
    assert any("already approved" in r for r in await workshop.ephemerals())
    second = await workshop.decide(run_id, "deny", "carol", reason="changed my mind")
    assert second is not None and not second.applied
    await assert_reserved_once(workshop)
    assert (await workshop.until(run_id, "completed"))["calls"][0]["state"] == "succeeded"


async def test_mixed_batch_runs_the_read_and_holds_the_write_until_approved(
    workshop: Workshop,
) -> None:
    """The default batch policy (hold_effects): while one call of the batch waits for a human,
    reads run and nothing with an effect does; both results go back together, by call id."""
    run_id = await workshop.submit("openai-responses", "workshop-mixed")
    await workshop.until(run_id, "paused_approval")
    view = await workshop.poll(run_id, lambda v: v["calls"][0]["state"] == "succeeded", 15)
    assert [c["tool"] for c in view["calls"]] == ["check_seats", "reserve_seat"]
    assert view["status"] == "paused_approval"
    assert view["calls"][1]["state"] == "needs_approval"
    assert await reserve_requests(workshop) == 0
    await workshop.decide(run_id, "approve", "carol")
    view = await workshop.until(run_id, "completed")
    assert [c["state"] for c in view["calls"]] == ["succeeded", "succeeded"]
    assert '"available":2' in view["final_text"] and "reservation_id" in view["final_text"]
    assert await reserve_requests(workshop) == 1


@pytest.mark.parametrize("api", APIS)
async def test_denied_write_never_runs_and_the_model_is_told_why(
    workshop: Workshop, api: str
) -> None:
    run_id = await workshop.submit(api)
    await workshop.until(run_id, "paused_approval")
    verdict = await workshop.decide(run_id, "deny", "carol", reason="budget frozen")
    assert verdict is not None and verdict.applied
    view = await workshop.until(run_id, "completed")
    assert await reserve_requests(workshop) == 0
    assert view["calls"][0]["state"] == "denied"
    assert "denied by approver carol: budget frozen" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_expired_approval_refuses_late_decisions_and_tells_the_model(
    workshop: Workshop, api: str
) -> None:
    run_id = await workshop.submit(api, approval_ttl_s=1.0)
    message = await workshop.slack_request(run_id)
    # Nobody decides: arq's deferred job expires the approval, and the run goes on.
    view = await workshop.until(run_id, "completed")
    assert view["calls"][0]["state"] == "expired"
    assert "approval_expired" in view["final_text"]
    assert await workshop.click(message, CAROL) == 200
    assert any("already expired" in r for r in await workshop.ephemerals())
    late = await workshop.decide(run_id, "approve", "carol")
    assert late is not None and not late.applied
    assert await reserve_requests(workshop) == 0


@pytest.mark.parametrize("api", APIS)
async def test_lost_answer_is_reconciled_not_replayed(workshop: Workshop, api: str) -> None:
    drop = {"mode": "commit_then_drop", "count": 1}
    await workshop.booking("POST", "/_faults", {"reserve": drop})
    run_id = await workshop.submit_approved(api)
    view = await workshop.until(run_id, "completed")
    await assert_reserved_once(workshop)
    assert view["calls"][0]["state"] == "succeeded"
    assert "reservation_id" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_inconclusive_reconciliation_pauses_the_run_and_notifies(
    workshop: Workshop, api: str
) -> None:
    await workshop.booking(
        "POST",
        "/_faults",
        {"reserve": {"mode": "commit_then_drop", "count": 1}, "lookup": {"mode": "lookup_unknown"}},
    )
    run_id = await workshop.submit_approved(api)
    view = await workshop.until(run_id, "paused_unknown_outcome")
    assert view["calls"][0]["state"] == "unresolved"
    assert await reserve_requests(workshop) == 1, "nothing is replayed"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        posts = [c["args"]["text"] for c in await workshop.slack_calls("chat.postMessage")]
        if any("write outcome unknown" in p and run_id in p for p in posts):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"no unknown-outcome notification for {run_id}: {posts}")


@pytest.mark.parametrize("api", APIS)
async def test_executor_killed_mid_write_is_reconciled_never_replayed(
    workshop: Workshop, api: str
) -> None:
    # The booking service commits at once, then holds the answer: the write is in flight.
    slow = {"mode": "slow", "delay_s": 4.0, "commit": "before", "count": 1}
    await workshop.booking("POST", "/_faults", {"reserve": slow})
    run_id = await workshop.submit_approved(api)
    await workshop.until_call(run_id, "executing")
    deadline = time.monotonic() + 10
    while await reserve_requests(workshop) == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    supervisor = workshop.system.supervisor
    killed_pid = supervisor.pids()["executor"]
    supervisor.kill("executor")

    view = await workshop.until(run_id, "completed", timeout_s=45)
    assert supervisor.wait_restarted("executor", killed_pid, 10) != killed_pid
    await assert_reserved_once(workshop)
    assert view["calls"][0]["state"] == "succeeded"
    async with CallgateClient(workshop.settings) as client:
        moves = [
            (e.data.get("from"), e.data.get("to"))
            for e in await client.events(run_id)
            if e.type == "call.transition"
        ]
    assert (["executing"], "unknown") in moves and (["unknown"], "reconciling") in moves


def test_cli_lists_approves_and_refuses(
    workshop: Workshop, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", workshop.settings.redis_url)
    monkeypatch.setenv("CALLGATE_KEY_PREFIX", workshop.settings.key_prefix)
    run_id = asyncio.run(workshop.submit("openai-chat"))
    asyncio.run(workshop.until(run_id, "paused_approval"))
    capsys.readouterr()
    assert main(["approvals", "--json"]) == 0
    [pending] = [a for a in orjson.loads(capsys.readouterr().out) if a["run_id"] == run_id]
    assert pending["arguments"] == {"event_id": "ws-101", "participant_id": "p-alice"}
    assert (pending["tool"], pending["approver_role"]) == ("reserve_seat", "events-lead")
    approval_id = pending["approval_id"]

    assert main(["approve", approval_id, "--as", "bob"]) == 1
    assert "refused: bob does not hold the role events-lead" in capsys.readouterr().err
    assert main(["approvals"]) == 0
    assert approval_id in capsys.readouterr().out, "a refused decision leaves it pending"
    assert main(["approve", approval_id, "--as", "carol"]) == 0
    assert f"approved {approval_id}" in capsys.readouterr().out
    asyncio.run(workshop.until(run_id, "completed"))
    assert main(["deny", approval_id, "--as", "carol", "--reason", "late"]) == 1
    assert "no pending approval" in capsys.readouterr().err
    assert asyncio.run(reserve_requests(workshop)) == 1
