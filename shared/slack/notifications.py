"""Post approval-requested and outcome-unknown notifications to Slack, on the common loop.

The notify streams carry envelopes (`ApprovalRequested`, `OutcomeUnknown`) like every other
stream, so the bot reads them with the one consumer-group loop every worker runs
(`callgate.streams.worker.StreamWorker`) and inherits its guarantees: a message is acked only
after Slack accepted the post; a post that fails stays pending and is reclaimed after
``claim_idle_ms`` (the retry back-off), and dead-lettered after ``max_deliveries``; a message
that does not decode, or is of another kind, is dead-lettered at once with the reason.  A
crash between the post and the ack posts twice, which is harmless: both messages carry the
same buttons and the validator applies one decision.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from callgate.config import Settings
from callgate.connect import RedisClient
from callgate.envelopes import CARRIED_ON, ApprovalRequested, Envelope, OutcomeUnknown
from callgate.errors import EnvelopeError
from callgate.keys import Keys
from callgate.slack.messages import Notification
from callgate.streams.delivery import Delivery
from callgate.streams.worker import StreamWorker

Post = Callable[[Notification], Awaitable[None]]


def notification_worker(
    redis: RedisClient,
    settings: Settings,
    post: Post,
    *,
    group: str = "slack_approvals",
    consumer: str | None = None,
) -> StreamWorker:
    """A consumer in ``group`` over every partition's notify stream, posting each one."""

    async def handle(message: Envelope, delivery: Delivery) -> None:
        match message:
            case ApprovalRequested() | OutcomeUnknown():
                await post(Notification.of(message))
            case _:
                raise EnvelopeError(f"not a notification: {message.kind!r}")

    streams = Keys(settings.key_prefix, settings.partitions).streams("notify")
    return StreamWorker(
        redis,
        settings,
        group=group,
        streams=streams,
        handler=handle,
        consumer=consumer,
        accepts=dict.fromkeys(streams, CARRIED_ON["notify"]),
    )
