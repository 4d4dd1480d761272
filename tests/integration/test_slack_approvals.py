"""The Slack approvals bot against a real fake Slack server (loopback HTTP) and real Redis.

Clicks are built the way Slack sends them: a form-encoded ``payload=`` JSON body signed with
v0 HMAC-SHA256 over ``v0:{timestamp}:{body}``, in X-Slack-Request-Timestamp and
X-Slack-Signature.  Each test drives the notification consumer in burst mode, so it waits
on observable state rather than sleeps.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.decisions.claims import read_approval_claims
from callgate.envelopes import ApprovalRequested, OutcomeUnknown, encode
from callgate.keys import Keys
from callgate.slack.bot import EVENTS_PATH, SlackBot
from callgate.slack.messages import APPROVE_ACTION, DENY_ACTION, RESOLVE_ACTIONS, ButtonValue
from callgate.slack.settings import Approver, SlackSettings
from callgate.standins.fake_slack import FakeSlack
from tests import slack_clicks
from tests.slack_clicks import CHANNEL, SECRET, TOKEN, button_value, serving_bot

ROOT = Path(__file__).resolve().parents[2]
RUN, APPROVAL, CALL, HASH = "run-slack-1", "appr-1", "call-1", "sha256:abc123"
APPROVERS = {
    "U123": Approver(user="carol", roles=frozenset({"events-lead"})),
    "U456": Approver(user="dave", roles=frozenset({"finance"})),
}


@pytest.fixture
def slack_settings(fake: FakeSlack) -> SlackSettings:
    return SlackSettings(
        api_url=fake.url,
        bot_token=TOKEN,
        signing_secret=SECRET,
        channel=CHANNEL,
        approvers=APPROVERS,
    )


@pytest.fixture
async def bot(
    settings: Settings, slack_settings: SlackSettings, redis: aioredis.Redis
) -> AsyncIterator[tuple[SlackBot, str]]:
    async with serving_bot(settings, slack_settings, redis) as served:
        yield served


async def write_record(redis: aioredis.Redis, keys: Keys, **fields: str) -> None:
    record = {
        "approval_id": APPROVAL,
        "run_id": RUN,
        "turn": "2",
        "call_id": CALL,
        "tool": "book_venue",
        "args_hash": HASH,
        "arguments": orjson.dumps({"venue": "Hall A", "api_key": "sk-live-abcdef123456"}).decode(),
        "requested_by": "alice",
        "approver_role": "events-lead",
        "expires_ms": str(int(time.time() * 1000) + 600_000),
        "state": "pending",
    }
    record.update(fields)
    await redis.hset(keys.approval(RUN, APPROVAL), mapping=record)  # type: ignore[misc]


async def notify(redis: aioredis.Redis, keys: Keys, **fields: Any) -> None:
    """Post a notification as the validator's (or reconciler's) step does."""
    note: ApprovalRequested | OutcomeUnknown
    if fields.pop("type", "approval_requested") == "unknown_outcome":
        note = OutcomeUnknown(
            run_id=RUN,
            turn=1,
            call_id=CALL,
            tool="book_venue",
            operation_id="op-1",
            detail=fields["detail"],
        )
    else:
        note = ApprovalRequested(
            run_id=RUN,
            turn=1,
            call_id=CALL,
            approval_id=APPROVAL,
            tool="book_venue",
            args_hash=HASH,
            arguments={"venue": "Hall A", "api_key": "sk-live-abcdef123456"},
            approver_role="events-lead",
            requested_by=fields.get("requested_by", "alice"),
            expires_ms=int(time.time() * 1000) + 600_000,
        )
    await redis.xadd(keys.stream("notify", keys.partition(RUN)), {"d": encode(note)})


def click_body(message: dict[str, Any], user: str, action_id: str, value: str) -> str:
    return slack_clicks.click_body(message, user, action_id, value, CHANNEL)


def sign(body: str, timestamp: int, secret: str = SECRET) -> str:
    return slack_clicks.sign(body, timestamp, secret)


async def send_click(
    url: str, body: str, *, timestamp: int | None = None, signature: str | None = None
) -> int:
    return await slack_clicks.send_click(
        url, body, SECRET, timestamp=timestamp, signature=signature
    )


@dataclass(frozen=True)
class Posted:
    """A decision the bot posted, as its verified token says it."""

    run_id: str
    call_id: str
    approval_id: str
    decision: str
    approver: str
    args_hash: str
    signer: str
    reason: str | None


async def decisions(redis: aioredis.Redis, keys: Keys) -> list[Posted]:
    """The bot's decisions, each verified with the session's trust file."""
    found = []
    for verified in await slack_clicks.verified_decisions(redis, keys, RUN):
        claims = read_approval_claims(verified.claims)
        found.append(
            Posted(
                claims.run,
                claims.call,
                claims.apr,
                claims.act,
                verified.person,
                claims.hash,
                verified.signer,
                claims.reason,
            )
        )
    return found


async def posted_request(app: SlackBot, fake: FakeSlack, redis: aioredis.Redis) -> dict[str, Any]:
    """Write the record, notify, let the consumer post; return the message as Slack stores it."""
    await write_record(redis, app.keys)
    await notify(redis, app.keys)
    assert await app.consumer.run_burst() == 1
    (call,) = fake.calls_of("chat.postMessage")
    return {
        "type": "message",
        "ts": "1700000000.000100",
        "text": call["args"]["text"],
        "blocks": call["args"]["blocks"],
    }


async def test_approval_request_is_posted_with_approve_and_deny_buttons(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    message = await posted_request(app, fake, redis)
    (call,) = fake.calls_of("chat.postMessage")
    assert call["token_ok"] and call["args"]["channel"] == CHANNEL
    rendered = orjson.dumps(call["args"]["blocks"]).decode()
    for shown in ("book_venue", "Hall A", "alice", "events-lead", HASH):
        assert shown in rendered
    assert "sk-live-abcdef123456" not in rendered, "arguments must be redacted"
    for action_id in (APPROVE_ACTION, DENY_ACTION):
        value = ButtonValue.from_value(button_value(message, action_id))
        assert value == ButtonValue(run_id=RUN, approval_id=APPROVAL, call_id=CALL, args_hash=HASH)
    stream = app.keys.stream("notify", app.keys.partition(RUN))
    assert (await redis.xpending(stream, "slack_approvals"))["pending"] == 0


@pytest.mark.parametrize(
    ("action_id", "decision", "outcome"),
    [(APPROVE_ACTION, "approve", "approved by carol"), (DENY_ACTION, "deny", "denied by carol")],
)
async def test_signed_click_posts_the_decision_and_updates_the_message(
    bot: tuple[SlackBot, str],
    fake: FakeSlack,
    redis: aioredis.Redis,
    action_id: str,
    decision: str,
    outcome: str,
) -> None:
    app, url = bot
    message = await posted_request(app, fake, redis)
    body = click_body(message, "U123", action_id, button_value(message, action_id))
    assert await send_click(url, body) == 200
    (posted,) = await decisions(redis, app.keys)
    assert (posted.run_id, posted.call_id, posted.approval_id) == (RUN, CALL, APPROVAL)
    assert (posted.decision, posted.approver, posted.args_hash, posted.signer) == (
        decision,
        "carol",
        HASH,
        "slack",
    )
    assert posted.reason is None, "the model must never see a Slack user id"
    (update,) = fake.calls_of("chat.update")
    assert update["token_ok"]
    assert (update["args"]["channel"], update["args"]["ts"]) == (CHANNEL, message["ts"])
    assert update["args"]["text"] == outcome
    assert all(b["type"] != "actions" for b in update["args"]["blocks"]), "buttons removed"
    assert not fake.calls_of("chat.postEphemeral")


REFUSALS = {
    "bad_signature": dict(signature="v0=" + "0" * 64, status=401),
    "wrong_secret": dict(secret="not-the-secret", status=401),
    "stale_timestamp": dict(age_s=6 * 60, status=401),
    "unknown_user": dict(user="U999", status=200, said="not a callgate approver"),
    "user_without_role": dict(user="U456", status=200, said="events-lead"),
    "already_decided": dict(record={"state": "approved"}, status=200, said="already approved"),
    "expired": dict(record={"expires_ms": "1000"}, status=200, said="expired"),
    "args_changed": dict(record={"args_hash": "sha256:other"}, status=200, said="changed"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_refused_click_posts_nothing_to_the_stream(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis, case: str
) -> None:
    spec: dict[str, Any] = REFUSALS[case]
    app, url = bot
    message = await posted_request(app, fake, redis)
    if "record" in spec:
        await write_record(redis, app.keys, **spec["record"])
    body = click_body(
        message, spec.get("user", "U123"), APPROVE_ACTION, button_value(message, APPROVE_ACTION)
    )
    ts = int(time.time()) - spec.get("age_s", 0)
    signature = spec.get("signature") or sign(body, ts, spec.get("secret", SECRET))
    assert await send_click(url, body, timestamp=ts, signature=signature) == spec["status"]
    assert await decisions(redis, app.keys) == []
    assert not fake.calls_of("chat.update")
    ephemeral = fake.calls_of("chat.postEphemeral")
    if spec["status"] == 401:
        assert not ephemeral, "an unverified request must not reach any listener"
    else:
        (told,) = ephemeral
        assert told["args"]["user"] == spec.get("user", "U123")
        assert spec["said"] in told["args"]["text"]


async def test_unknown_outcome_is_posted_with_resolve_buttons(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    """Its clicks: tests/integration/test_slack_resolutions.py."""
    app, _ = bot
    await notify(
        redis, app.keys, type="unknown_outcome", detail="POST /bookings timed out after 10 s"
    )
    assert await app.consumer.run_burst() == 1
    (call,) = fake.calls_of("chat.postMessage")
    assert "write outcome unknown; run paused" in call["args"]["text"]
    (actions,) = [b for b in call["args"]["blocks"] if b["type"] == "actions"]
    assert [b["action_id"] for b in actions["elements"]] == list(RESOLVE_ACTIONS)
    assert "timed out" in orjson.dumps(call["args"]["blocks"]).decode()


async def test_failed_post_is_retried_and_bad_notifications_are_dead_lettered(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    fake.failures["chat.postMessage"] = ["internal_error"]
    await write_record(redis, app.keys)
    await notify(redis, app.keys)
    stream = app.keys.stream("notify", app.keys.partition(RUN))
    await redis.xadd(stream, {"d": b'{"type": "approval_requested"}'})
    assert await asyncio.wait_for(app.consumer.run_burst(), 10) == 2
    assert app.consumer.stats.failed == 1
    assert len(fake.calls_of("chat.postMessage")) == 2, "one failure, then one success"
    (dead,) = await redis.xrange(app.keys.dead_letter_for(stream))
    assert b"invalid envelope" in dead[1][b"reason"]
    assert (await redis.xpending(stream, "slack_approvals"))["pending"] == 0


async def test_no_post_for_an_approval_that_is_no_longer_pending(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    await write_record(redis, app.keys, state="expired")
    await notify(redis, app.keys)
    assert await app.consumer.run_burst() == 1
    assert not fake.calls_of("chat.postMessage")


def test_bot_refuses_to_start_without_a_signing_secret(
    settings: Settings, slack_settings: SlackSettings
) -> None:
    unsigned = SlackSettings(
        api_url=slack_settings.api_url,
        bot_token=TOKEN,
        signing_secret="",
        channel=CHANNEL,
        approvers=APPROVERS,
    )
    with pytest.raises(ValueError, match="CALLGATE_SLACK_SIGNING_SECRET"):
        SlackBot(settings, unsigned)


async def _wait_for(predicate: Any, timeout_s: float = 8.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_bot_process_end_to_end_and_never_logs_its_secrets(
    settings: Settings, subprocess_env: dict[str, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    """`python -m callgate.services.slack_approvals --port 0`: notification → post → click →
    decision."""
    keys = Keys(settings.key_prefix, settings.partitions)
    env = dict(
        subprocess_env,
        CALLGATE_SLACK_API_URL=fake.url,
        CALLGATE_SLACK_BOT_TOKEN=TOKEN,
        CALLGATE_SLACK_SIGNING_SECRET=SECRET,
        CALLGATE_SLACK_CHANNEL=CHANNEL,
        CALLGATE_SLACK_APPROVERS=orjson.dumps(
            {k: v.model_dump(mode="json") for k, v in APPROVERS.items()}
        ).decode(),
        CALLGATE_LOG_LEVEL="DEBUG",
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "callgate.services.slack_approvals",
        "--port",
        "0",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.removeprefix("listening on ") + EVENTS_PATH
        await write_record(redis, keys)
        await notify(redis, keys)
        await _wait_for(lambda: fake.calls_of("chat.postMessage"))
        (call,) = fake.calls_of("chat.postMessage")
        message = {"type": "message", "ts": "1700000000.000200", "blocks": call["args"]["blocks"]}
        body = click_body(message, "U123", APPROVE_ACTION, button_value(message, APPROVE_ACTION))
        assert await send_click(url, body) == 200
        (posted,) = await decisions(redis, keys)
        assert (posted.approver, posted.decision, posted.args_hash) == ("carol", "approve", HASH)
        assert fake.calls_of("chat.update")[0]["args"]["text"] == "approved by carol"
    finally:
        if proc.returncode is None:
            proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    logs = stderr.decode()
    assert "slack approvals bot serving" in logs
    assert TOKEN not in logs and SECRET not in logs


def test_fake_slack_runs_as_a_process() -> None:
    """`python -m callgate.standins.fake_slack` serves the Web API and lists recorded calls."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "callgate.standins.fake_slack", "--port", "0", "--token", TOKEN],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().strip().removeprefix("listening on ")
        assert base.startswith("http://127.0.0.1:")

        async def exercise() -> dict[str, Any]:
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with session.post(
                    f"{base}/api/chat.postMessage",
                    headers=headers,
                    json={"channel": CHANNEL, "text": "hi"},
                ) as resp:
                    assert (await resp.json())["ok"] is True
                async with session.post(f"{base}/api/auth.test") as resp:
                    assert (await resp.json())["error"] == "invalid_auth"
                async with session.get(f"{base}/_calls") as resp:
                    return dict(await resp.json())

        calls = asyncio.run(exercise())["calls"]
        assert [(c["method"], c["token_ok"]) for c in calls] == [
            ("chat.postMessage", True),
            ("auth.test", False),
        ]
    finally:
        proc.terminate()
        proc.wait(10)
