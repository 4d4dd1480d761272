"""The webhooks worker's arq queue: the follow pass every second, and the delivery jobs.

Both run on the one arq machinery (`callgate.streams.arq`): the pass is a periodic job (unique
per second across replicas, and under a lease besides), a delivery is a job whose retries wait
in Redis (`callgate.webhooks.deliver`).  Nothing here touches a run: the loop's workers neither
know nor wait for this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arq.connections import ArqRedis
from arq.cron import cron
from arq.worker import func

from callgate.config import Settings
from callgate.streams.arq import QueueSpec
from callgate.streams.arq_cluster import cluster_job_id
from callgate.streams.follow import Follower
from callgate.streams.outbound import Outbound
from callgate.streams.service import Runtime
from callgate.webhooks.deliver import DELIVER_WEBHOOK, Courier, job_of
from callgate.webhooks.events import WebhookEvent
from callgate.webhooks.follow import LEASE_MS, Feed, delivery_id
from callgate.webhooks.settings import Endpoint, WebhookSettings

FOLLOW_EVENTS = "follow_events"
DELIVERY_RESULT_S = 300
"""How long arq keeps a delivery's result (and so refuses its job id again): a repeated pass
comes within seconds; the delivered marker covers longer."""


def webhook_queue_name(settings: Settings) -> str:
    """The webhooks worker's own arq queue (no submitter may write it)."""
    return f"{settings.key_prefix}:arq:webhooks"


@dataclass
class WebhookWorker:
    """What one webhooks process keeps between jobs: its feed and its courier."""

    settings: Settings
    webhook_settings: WebhookSettings
    endpoints: Sequence[Endpoint]
    _feed: Feed | None = field(default=None, init=False)
    _courier: Courier | None = field(default=None, init=False)

    def queue(self) -> QueueSpec:
        every_second = set(range(60))
        return QueueSpec(
            webhook_queue_name(self.settings),
            [
                func(
                    self.deliver,
                    name=DELIVER_WEBHOOK,
                    keep_result=DELIVERY_RESULT_S,
                    max_tries=len(self.webhook_settings.retry_schedule_s) + 2,
                )
            ],
            [
                cron(
                    self.follow,
                    # On a cluster its job ids (name:when) take the queue's slot.
                    name=cluster_job_id(
                        self.settings, webhook_queue_name(self.settings), FOLLOW_EVENTS
                    ),
                    second=every_second,
                    run_at_startup=True,
                    unique=True,
                    timeout=LEASE_MS / 1000,
                )
            ],
        )

    async def follow(self, ctx: dict[str, Any]) -> int:
        """One follow pass (`Feed.run_pass`); how many deliveries it enqueued."""
        if self._feed is None:
            runtime: Runtime = ctx["runtime"]
            pool: ArqRedis = ctx["redis"]
            queue = webhook_queue_name(self.settings)

            async def enqueue(endpoint: Endpoint, event: WebhookEvent) -> bool:
                job_id = delivery_id(endpoint, event)
                job = await pool.enqueue_job(
                    DELIVER_WEBHOOK,
                    job_of(endpoint, event.as_dict(), job_id),
                    _job_id=cluster_job_id(self.settings, queue, job_id),
                    _queue_name=queue,
                )
                return job is not None

            follower = Follower(runtime.redis, runtime.keys, self.settings.retention_s)
            self._feed = Feed(
                follower,
                self.settings.partitions,
                self.settings.retention_s,
                self.endpoints,
                enqueue,
                self.webhook_settings.follow_batch,
                owner=runtime.consumer,
                max_age_s=self.webhook_settings.max_age_s,
            )
        return await self._feed.run_pass()

    async def deliver(self, ctx: dict[str, Any], job: dict[str, Any]) -> str:
        if self._courier is None:
            runtime: Runtime = ctx["runtime"]
            outbound = Outbound(
                runtime.redis,
                runtime.keys,
                self.settings.retention_s,
                self.settings.dead_letter_max_entries,
            )
            self._courier = Courier(
                {e.name: e for e in self.endpoints},
                self.webhook_settings,
                outbound,
                runtime.tool_session(),
            )
        return await self._courier.deliver(job, int(ctx.get("job_try", 1)))
