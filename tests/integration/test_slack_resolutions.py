"""Applied / Not applied / Recheck on an unknown-outcome message: the bot (serving HTTP
in-process) against the fake Slack Web API and real Redis.

The call record is written as the reconciler leaves it (``unresolved``); the validator's verdict
is written into the run's events as the validator writes it, so these tests see what the bot
does with each verdict.  The whole path with the real validator is tests/e2e/test_slack_resolve.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.decisions.claims import ResolveClaims, read_resolve_claims
from callgate.envelopes import OutcomeUnknown, encode
from callgate.keys import Keys
from callgate.records import CallRecord
from callgate.slack.bot import SlackBot
from callgate.slack.messages import RESOLVE_ACTIONS, RESOLVE_BLOCK, ResolveValue
from callgate.slack.settings import Approver, SlackSettings
from callgate.standins.fake_slack import FakeSlack
from callgate.states import CallState
from tests import slack_clicks
from tests.slack_clicks import CHANNEL, SECRET, TOKEN

RUN, CALL, OP = "run-slack-res-1", "t1.0", "op-7f3a"
APPLIED, NOT_APPLIED, RECHECK = RESOLVE_ACTIONS
APPROVERS = {"U123": Approver(user="carol", roles=frozenset({"events-lead"}))}


@pytest.fixture
async def bot(
    settings: Settings, fake: FakeSlack, redis: aioredis.Redis
) -> AsyncIterator[tuple[SlackBot, str]]:
    slack = SlackSettings(
        api_url=fake.url,
        bot_token=TOKEN,
        signing_secret=SECRET,
        channel=CHANNEL,
        approvers=APPROVERS,
        verdict_timeout_s=5,
    )
    async with slack_clicks.serving_bot(settings, slack, redis) as served:
        yield served


async def write_call(redis: aioredis.Redis, keys: Keys, **fields: Any) -> None:
    """The call as the reconciler leaves it when nothing could tell its outcome."""
    call = CallRecord(
        run_id=RUN,
        call_id=CALL,
        turn=1,
        index=0,
        provider_call_id="fc_1",
        tool="reserve_seat",
        arguments={"participant": "p-alice"},
        operation_id=OP,
        state=CallState.UNRESOLVED,
    )
    await redis.hset(
        keys.call(RUN, CALL),  # type: ignore[misc]
        mapping=call.model_copy(update=fields).to_hash(),
    )


async def posted_notice(
    app: SlackBot, fake: FakeSlack, redis: aioredis.Redis, **call_fields: Any
) -> dict[str, Any]:
    """Write the call, notify, let the consumer post; return the message as Slack stores it."""
    await write_call(redis, app.keys, **call_fields)
    note = OutcomeUnknown(
        run_id=RUN,
        turn=1,
        call_id=CALL,
        tool="reserve_seat",
        operation_id=OP,
        detail="POST /reservations: answer lost",
    )
    await redis.xadd(app.keys.stream("notify", app.keys.partition(RUN)), {"d": encode(note)})
    assert await app.consumer.run_burst() == 1
    (call,) = fake.calls_of("chat.postMessage")
    return {
        "type": "message",
        "ts": "1700000000.000300",
        "text": call["args"]["text"],
        "blocks": call["args"]["blocks"],
    }


async def click(url: str, message: dict[str, Any], user: str, action_id: str) -> int:
    value = slack_clicks.button_value(message, action_id)
    body = slack_clicks.click_body(message, user, action_id, value, CHANNEL)
    return await slack_clicks.send_click(url, body, SECRET)


async def resolutions(redis: aioredis.Redis, keys: Keys) -> list[tuple[ResolveClaims, str, str]]:
    """(claims, person, signer) of every resolution on the run's decisions stream, verified."""
    return [
        (read_resolve_claims(verified.claims), verified.person, verified.signer)
        for verified in await slack_clicks.verified_decisions(redis, keys, RUN)
    ]


async def clicked_by_carol(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis, action_id: str
) -> tuple[dict[str, Any], tuple[ResolveClaims, str, str]]:
    """Post the notice and click ``action_id`` on it as carol (U123): the message, and the one
    verified resolution the click posted."""
    app, url = bot
    message = await posted_notice(app, fake, redis)
    assert await click(url, message, "U123", action_id) == 200
    (resolution,) = await resolutions(redis, app.keys)
    return message, resolution


async def verdict(redis: aioredis.Redis, keys: Keys, event: str, msg_id: str, **data: Any) -> None:
    """What the validator writes in the run's events once it has applied or refused."""
    payload = orjson.dumps({"call_id": CALL, "msg_id": msg_id, **data})
    await redis.xadd(keys.events(RUN), {"t": int(time.time() * 1000), "type": event, "d": payload})


async def until(predicate: Callable[[], Any], timeout_s: float = 8.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := predicate()):
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)
    return found


async def test_unknown_outcome_has_three_round_tripping_buttons(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    message = await posted_notice(app, fake, redis)
    (actions,) = [b for b in message["blocks"] if b["type"] == "actions"]
    assert actions["block_id"] == RESOLVE_BLOCK
    labels = [b["text"]["text"] for b in actions["elements"]]
    assert labels == ["Applied", "Not applied", "Recheck"]
    for button in actions["elements"]:
        assert ResolveValue.from_value(button["value"]) == ResolveValue(
            run_id=RUN, call_id=CALL, op=OP
        )
    applied = actions["elements"][0]["confirm"]["text"]["text"]
    assert "no result" in applied and "empty result" in applied
    assert OP in orjson.dumps(message["blocks"]).decode(), "the person sees the operation id"


async def test_applied_posts_a_signed_resolution_and_shows_the_verdict(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    message, (claims, person, signer) = await clicked_by_carol(bot, fake, redis, APPLIED)
    assert (claims.run, claims.call, claims.op, claims.outcome) == (RUN, CALL, OP, "applied")
    assert (person, signer) == ("carol", "slack")
    assert claims.result is None and claims.reason is None, "no payload, no Slack user id"
    assert not fake.calls_of("chat.update"), "nothing shown before callgate's verdict"
    await verdict(redis, app.keys, "call.resolved", claims.jti, outcome="applied", person="carol")
    (update,) = await until(lambda: fake.calls_of("chat.update"))
    assert (update["args"]["channel"], update["args"]["ts"]) == (CHANNEL, message["ts"])
    assert update["args"]["text"] == "applied, confirmed by carol"
    assert all(b["type"] != "actions" for b in update["args"]["blocks"]), "buttons removed"
    assert not fake.calls_of("chat.postEphemeral")


async def test_recheck_keeps_the_buttons(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    _, (claims, _, _) = await clicked_by_carol(bot, fake, redis, RECHECK)
    assert claims.outcome == "recheck"
    await verdict(redis, app.keys, "call.resolved", claims.jti, outcome="recheck")
    (update,) = await until(lambda: fake.calls_of("chat.update"))
    assert update["args"]["text"] == "recheck asked by carol"
    assert update["args"]["blocks"][-1]["type"] == "actions", "still unknown? click again"


async def test_a_refusal_by_the_validator_is_told_escaped_and_keeps_the_buttons(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, _ = bot
    _, (claims, _, _) = await clicked_by_carol(bot, fake, redis, NOT_APPLIED)
    assert claims.outcome == "not_applied"
    await verdict(
        redis,
        app.keys,
        "resolve.refused",
        claims.jti,
        reason="carol<!channel> holds none of the resolver roles ['operator']",
    )
    (told,) = await until(lambda: fake.calls_of("chat.postEphemeral"))
    assert told["args"]["user"] == "U123"
    assert "callgate refused it: carol&lt;!channel&gt; holds none" in told["args"]["text"]
    assert "<!channel>" not in told["args"]["text"]
    assert not fake.calls_of("chat.update")


REFUSALS: dict[str, dict[str, Any]] = {
    "unmapped_user": {"user": "U999", "said": "not mapped to a callgate person"},
    "already_resolved": {"call": {"state": CallState.SUCCEEDED}, "said": "succeeded, not unres"},
    "other_operation": {"call": {"operation_id": "op-other"}, "said": "operation id"},
    "no_such_call": {"gone": True, "said": "no such call"},
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_refused_click_posts_nothing_and_is_told_why(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis, case: str
) -> None:
    spec = REFUSALS[case]
    app, url = bot
    message = await posted_notice(app, fake, redis)
    if "call" in spec:
        await write_call(redis, app.keys, **spec["call"])
    if spec.get("gone"):
        await redis.delete(app.keys.call(RUN, CALL))
    user = spec.get("user", "U123")
    assert await click(url, message, user, APPLIED) == 200
    assert await resolutions(redis, app.keys) == []
    (told,) = fake.calls_of("chat.postEphemeral")
    assert told["args"]["user"] == user and spec["said"] in told["args"]["text"]
    assert not fake.calls_of("chat.update")


async def test_an_unsigned_click_reaches_no_listener(
    bot: tuple[SlackBot, str], fake: FakeSlack, redis: aioredis.Redis
) -> None:
    app, url = bot
    message = await posted_notice(app, fake, redis)
    value = slack_clicks.button_value(message, APPLIED)
    body = slack_clicks.click_body(message, "U123", APPLIED, value, CHANNEL)
    assert await slack_clicks.send_click(url, body, "not-the-secret") == 401
    assert await resolutions(redis, app.keys) == []
    assert not fake.calls_of("chat.postEphemeral")
