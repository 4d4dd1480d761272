"""Slack interactions built the way Slack sends them, for the bot's tests, and the bot serving
them over loopback HTTP.

A click is a form-encoded ``payload=`` JSON body (``block_actions``), signed with v0
HMAC-SHA256 over ``v0:{timestamp}:{body}`` in X-Slack-Request-Timestamp / X-Slack-Signature.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import redis.asyncio as aioredis

from callgate.auth.tokens import VerifiedDecision, verify_decision
from callgate.auth.trust import load_trust
from callgate.config import Settings
from callgate.envelopes import SignedDecision, decode
from callgate.keys import Keys
from callgate.slack.bot import EVENTS_PATH, SlackBot
from callgate.slack.settings import SlackSettings
from callgate.standins.fake_slack import FakeSlack

TOKEN = "xoxb-test-bot-token-4242"
SECRET = "test-signing-secret-8e1f"
CHANNEL = "C0APPROVALS"


def button_value(message: dict[str, Any], action_id: str) -> str:
    (actions,) = [b for b in message["blocks"] if b["type"] == "actions"]
    (button,) = [e for e in actions["elements"] if e["action_id"] == action_id]
    return str(button["value"])


def click_body(message: dict[str, Any], user: str, action_id: str, value: str, channel: str) -> str:
    """A block_actions request body as Slack sends it."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0APP",
        "token": "legacy-verification-token",
        "trigger_id": "1.2.3",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "channel": {"id": channel, "name": "approvals"},
        "message": message,
        "response_url": "http://127.0.0.1:9/unused",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "callgate_approval",
                "value": value,
                "text": {"type": "plain_text", "text": "x"},
                "action_ts": str(time.time()),
            }
        ],
    }
    return urlencode({"payload": orjson.dumps(payload).decode()})


def sign(body: str, timestamp: int, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    return f"v0={digest.hexdigest()}"


async def send_click(
    url: str, body: str, secret: str, *, timestamp: int | None = None, signature: str | None = None
) -> int:
    """POST the click; return the HTTP status the bot answered."""
    ts = int(time.time()) if timestamp is None else timestamp
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": signature or sign(body, ts, secret),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status


@asynccontextmanager
async def fake_slack() -> AsyncIterator[FakeSlack]:
    """The fake Slack Web API on loopback, accepting the bot token `TOKEN`."""
    server = FakeSlack(token=TOKEN)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def serving_bot(
    settings: Settings, slack: SlackSettings, redis: aioredis.Redis
) -> AsyncIterator[tuple[SlackBot, str]]:
    """The bot serving HTTP in-process, and its events URL; tests drive its consumer with
    run_burst."""
    app = SlackBot(settings, slack, redis)
    port = await app.start(consume=False)
    try:
        yield app, f"http://127.0.0.1:{port}{EVENTS_PATH}"
    finally:
        await app.stop()


async def verified_decisions(
    redis: aioredis.Redis, keys: Keys, run_id: str
) -> list[VerifiedDecision]:
    """Every decision on the run's decisions stream, each verified with the session's trust
    file."""
    trust = load_trust(Path(os.environ["CALLGATE_TRUST_FILE"]))
    found = []
    for _, fields in await redis.xrange(keys.run_stream("decisions", run_id)):
        envelope = decode(fields[b"d"])
        assert isinstance(envelope, SignedDecision)
        found.append(verify_decision(envelope.token, trust, now=time.time()))
    return found
