"""The bot itself: a Bolt async app served by aiohttp, plus the notification worker.

Bolt's built-in `AsyncRequestVerification` middleware stays on: every request to
``/slack/events`` must carry a v0 HMAC-SHA256 signature of ``v0:{timestamp}:{body}`` made
with the signing secret, and a timestamp within five minutes, or Bolt answers 401 before
any listener runs.  ``process_before_response`` makes the HTTP answer wait for the listener,
so by the time Slack (or a test) gets its 200 the decision is on the stream.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, assert_never

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from callgate.auth.deployment import signer_of
from callgate.config import Settings
from callgate.connect import RedisClient, redis_client
from callgate.keys import Keys
from callgate.logs import log_fields
from callgate.slack import messages
from callgate.slack.clicks import ClickHandler
from callgate.slack.messages import Notification
from callgate.slack.notifications import notification_worker
from callgate.slack.records import load_approval
from callgate.slack.resolutions import ResolveHandler
from callgate.slack.settings import SlackSettings

log = logging.getLogger("callgate.slack")

EVENTS_PATH = "/slack/events"
ACTION_IDS = re.compile(f"^({messages.APPROVE_ACTION}|{messages.DENY_ACTION})$")
RESOLVE_ACTION_IDS = re.compile(f"^({'|'.join(messages.RESOLVE_ACTIONS)})$")


class SlackBot:
    """Everything one bot process runs; `start` serves, `stop` is safe to call twice."""

    def __init__(
        self, settings: Settings, slack: SlackSettings, redis: RedisClient | None = None
    ) -> None:
        slack.check()
        self.settings = settings
        self.slack = slack
        self.keys = Keys(settings.key_prefix, settings.partitions)
        self._own_redis = redis is None
        self.redis = redis or redis_client(settings.redis_url)
        self.client = AsyncWebClient(
            token=slack.bot_token.get_secret_value(),
            base_url=slack.api_url,
            timeout=slack.api_timeout_s,
            logger=logging.getLogger("callgate.slack.sdk"),
        )
        self.client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
        signer = signer_of(settings, slack.key_id)
        self.clicks = ClickHandler(
            self.redis, self.keys, slack.approvers, signer, team_id=slack.team_id
        )
        self.resolutions = ResolveHandler(
            self.redis,
            self.keys,
            slack.approvers,
            signer,
            team_id=slack.team_id,
            verdict_timeout_s=slack.verdict_timeout_s,
        )
        self.bolt = self._build_bolt()
        self.consumer = notification_worker(
            self.redis, settings, self.post_notification, group=slack.group
        )
        self._runner: web.AppRunner | None = None
        self._consuming: asyncio.Task[None] | None = None

    def _build_bolt(self) -> AsyncApp:
        bolt = AsyncApp(
            client=self.client,
            signing_secret=self.slack.signing_secret.get_secret_value(),
            request_verification_enabled=True,
            process_before_response=True,
            logger=logging.getLogger("callgate.slack.bolt"),
            name="callgate-slack-approvals",
        )

        async def on_click(
            ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient
        ) -> None:
            await ack()
            await self.clicks.handle(body, action, client)

        async def on_resolve(
            ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient
        ) -> None:
            await ack()
            await self.resolutions.handle(body, action, client)

        bolt.action(ACTION_IDS)(on_click)
        bolt.action(RESOLVE_ACTION_IDS)(on_resolve)
        return bolt

    def web_app(self) -> web.Application:
        """The HTTP side: Slack's interactivity URL is ``http(s)://host:port/slack/events``."""

        async def events(request: web.Request) -> web.Response:
            response = await self.bolt.async_dispatch(await to_bolt_request(request))
            return await to_aiohttp_response(response)

        async def healthz(_: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post(EVENTS_PATH, events)
        app.router.add_get("/healthz", healthz)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, consume: bool = True) -> int:
        """Serve HTTP (and consume notifications unless ``consume`` is False); return the port."""
        self._runner = web.AppRunner(self.web_app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound = int(self._runner.addresses[0][1])
        if consume:
            self._consuming = asyncio.create_task(self.consumer.run(), name="slack-notify")
        log.info(
            "slack approvals bot serving",
            extra=log_fields(
                host=host,
                port=bound,
                channel=self.slack.channel,
                api_url=self.slack.api_url,
                approvers=sorted(self.slack.approvers),
            ),
        )
        return bound

    async def stop(self) -> None:
        consuming, self._consuming = self._consuming, None
        if consuming is not None:
            await self.consumer.shutdown()
            await consuming
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        await self.resolutions.stop()
        if self._own_redis:
            self._own_redis = False
            await self.redis.aclose()

    async def post_notification(self, note: Notification) -> None:
        """Post one notification to the channel; raise to have it retried."""
        match note.type:
            case "approval_requested":
                await self._post_approval(note)
            case "unknown_outcome":
                await self.client.chat_postMessage(
                    channel=self.slack.channel,
                    text=messages.unknown_outcome_text(note),
                    blocks=messages.unknown_outcome_blocks(note),
                    unfurl_links=False,
                )
            case _:
                assert_never(note.type)

    async def _post_approval(self, note: Notification) -> None:
        assert note.approval_id is not None
        record = await load_approval(self.redis, self.keys, note.run_id, note.approval_id)
        if record is not None and record.state != "pending":
            log.info(
                "approval no longer pending; not posted",
                extra=log_fields(
                    run_id=note.run_id, approval_id=note.approval_id, state=record.state
                ),
            )
            return
        requested_by = note.requested_by or (record.requested_by if record else None)
        await self.client.chat_postMessage(
            channel=self.slack.channel,
            text=messages.approval_text(note),
            blocks=messages.approval_blocks(note, requested_by),
            unfurl_links=False,
        )
