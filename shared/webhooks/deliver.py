"""One webhook delivery, as an arq job: sign, POST, and retry with back-off or give up.

The job (`DELIVER_WEBHOOK`) holds the endpoint's *name* and the event, never the secret or the
URL: the worker looks both up in the deployment's endpoints when it runs, so a job written
into the queue by anyone else can send nothing anywhere the deployment did not register.

A 2xx answer is a delivery (marked, so the same event is never posted to that endpoint again).
Anything else — another status, a refused connection, a timeout — is retried after the next
delay of ``retry_schedule_s`` (arq's ``Retry``: the job waits in Redis, no task sleeps), and
after the last one the delivery is dead-lettered where `callgate dead-letters` lists it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from arq import Retry

from callgate.clock import now_ms
from callgate.logs import log_fields
from callgate.streams.outbound import Outbound
from callgate.webhooks.settings import Endpoint, WebhookSettings
from callgate.webhooks.signing import EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER, sign

log = logging.getLogger("callgate.webhooks")

DELIVER_WEBHOOK = "deliver_webhook"
USER_AGENT = "callgate-webhooks/1"


def job_of(endpoint: Endpoint, event: Mapping[str, Any], delivery_id: str) -> dict[str, Any]:
    """The one argument of a `DELIVER_WEBHOOK` job."""
    return {"endpoint": endpoint.name, "delivery_id": delivery_id, "event": dict(event)}


@dataclass
class Courier:
    """Delivers jobs to the deployment's endpoints (one per worker process)."""

    endpoints: Mapping[str, Endpoint]
    settings: WebhookSettings
    outbound: Outbound
    session: aiohttp.ClientSession

    @property
    def attempts(self) -> int:
        return len(self.settings.retry_schedule_s) + 1

    async def deliver(self, job: Mapping[str, Any], job_try: int) -> str:
        """Deliver one job on its ``job_try``-th try; what became of it."""
        endpoint = self.endpoints.get(str(job.get("endpoint")))
        delivery_id = str(job.get("delivery_id"))
        event = job.get("event")
        if endpoint is None or not isinstance(event, dict):
            log.warning(
                "webhook job for no registered endpoint dropped",
                extra=log_fields(endpoint=job.get("endpoint"), delivery_id=delivery_id),
            )
            return "dropped"
        if await self.outbound.delivered(delivery_id):
            return "delivered before"
        body = orjson.dumps(event)
        error = await self._post(endpoint, event, body)
        if error is None:
            await self.outbound.mark_delivered(delivery_id)
            await self.outbound.count(endpoint.name, "delivered")
            return "delivered"
        await self.outbound.count(endpoint.name, "failed")
        log.info(
            "webhook delivery failed",
            extra=log_fields(
                endpoint=endpoint.name, delivery_id=delivery_id, attempt=job_try, error=error
            ),
        )
        schedule = self.settings.retry_schedule_s
        if job_try <= len(schedule):
            raise Retry(defer=schedule[job_try - 1])
        reason = f"webhook {endpoint.name}: gave up after {job_try} attempts; last: {error}"
        raw = orjson.dumps(
            {
                "kind": "webhook_delivery",
                "run_id": event.get("run_id"),
                "endpoint": endpoint.name,
                "event": event,
            }
        )
        await self.outbound.dead_letter(
            str(event.get("run_id", "")), delivery_id, reason, job_try, raw
        )
        await self.outbound.count(endpoint.name, "dead_lettered")
        log.warning(
            "webhook delivery dead-lettered",
            extra=log_fields(endpoint=endpoint.name, delivery_id=delivery_id),
        )
        return "dead-lettered"

    async def _post(self, endpoint: Endpoint, event: Mapping[str, Any], body: bytes) -> str | None:
        """POST the signed body; None on a 2xx answer, else what went wrong."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            SIGNATURE_HEADER: sign(endpoint.key(), body, now_ms() // 1000),
            EVENT_ID_HEADER: str(event.get("id")),
            EVENT_TYPE_HEADER: str(event.get("type")),
        }
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        try:
            async with self.session.post(
                endpoint.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as reply:
                if 200 <= reply.status < 300:
                    return None
                return f"HTTP {reply.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
