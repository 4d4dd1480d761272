"""webhooks worker (arq): follows every run's event log and delivers signed webhooks.

It reads what the ledger already writes (the runs and inbox indexes, each run's event log) from
cursors it keeps in Redis, so a worker that was down catches up, and each event is handed to
each subscribed endpoint once (`callgate.webhooks.follow`); deliveries are retried with back-off
from its own arq queue and dead-lettered when they run out (`callgate.webhooks.deliver`).  It
also keeps the event counters `/metrics` exports, so run it with no endpoints too.

``python -m callgate.services.webhooks``; the endpoints come from
``CALLGATE_WEBHOOK_ENDPOINTS_FILE``
(README: Webhooks).  Endpoints that do not load: one logged line and exit 2.
"""

from __future__ import annotations

import logging

from callgate.config import Settings
from callgate.logs import log_fields, setup_logging
from callgate.streams.arq import serve
from callgate.streams.service import START_FAILED, run_worker
from callgate.webhooks.settings import WebhookConfigError, WebhookSettings
from callgate.webhooks.worker import WebhookWorker

log = logging.getLogger("callgate.webhooks")


def main() -> None:
    setup_logging("webhooks")
    settings = Settings()
    webhook_settings = WebhookSettings()
    try:
        endpoints = webhook_settings.load()
    except WebhookConfigError as exc:
        log.error(
            "cannot start: fix the deployment and start again",
            extra=log_fields(service="webhooks", reason=exc.message),
        )
        raise SystemExit(START_FAILED) from None
    log.info(
        "webhook endpoints",
        extra=log_fields(endpoints={e.name: sorted(e.events) for e in endpoints}),
    )
    worker = WebhookWorker(settings, webhook_settings, endpoints)
    run_worker("webhooks", serve(settings, [worker.queue()], "webhooks"))


if __name__ == "__main__":
    main()
