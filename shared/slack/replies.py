"""What every click handler of the bot shares: where a click came from, and its two answers
(an ephemeral note to the clicker, an update of the message clicked).

A failed Slack call is logged, never raised: whatever the click posted to callgate is already
durable, and only the message is stale.  The log names Slack's error code, never the request,
whose headers hold the bot token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from callgate.logs import log_fields

log = logging.getLogger("callgate.slack.clicks")

SLACK_ERRORS: tuple[type[Exception], ...] = (SlackApiError, aiohttp.ClientError, TimeoutError)
"""A Slack Web API call failed (answered an error, or did not answer)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Who clicked, in which workspace, on which message (from Bolt's verified payload)."""

    user_id: str
    team_id: str | None
    channel_id: str | None
    message_ts: str | None
    blocks: list[dict[str, Any]] | None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Origin:
        container = body.get("container") or {}
        message = body.get("message") or {}
        user = body.get("user") or {}
        return cls(
            user_id=str(user.get("id", "")),
            team_id=(body.get("team") or {}).get("id") or user.get("team_id"),
            channel_id=(body.get("channel") or {}).get("id") or container.get("channel_id"),
            message_ts=container.get("message_ts") or message.get("ts"),
            blocks=message.get("blocks"),
        )


async def tell(client: AsyncWebClient, channel_id: str | None, user_id: str, text: str) -> None:
    """An ephemeral message only the clicker sees."""
    if not (channel_id and user_id):
        return
    try:
        await client.chat_postEphemeral(channel=channel_id, user=user_id, text=text)
    except SLACK_ERRORS as exc:
        log.warning("chat.postEphemeral failed", extra=log_fields(error=slack_error(exc)))


async def update(
    client: AsyncWebClient,
    channel_id: str | None,
    message_ts: str | None,
    text: str,
    blocks: list[dict[str, Any]],
) -> None:
    """Replace the clicked message (``text`` and ``blocks`` already escaped)."""
    if not (channel_id and message_ts):
        return
    try:
        await client.chat_update(channel=channel_id, ts=message_ts, text=text, blocks=blocks)
    except SLACK_ERRORS as exc:
        log.warning("chat.update failed", extra=log_fields(error=slack_error(exc)))


def slack_error(exc: Exception) -> str:
    """Slack's error code (never the request, which holds the token in its headers)."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error"))
    return type(exc).__name__
