"""OpenTelemetry tracing of runs across worker processes (README "Tracing").

`start_tracing` is all a process calls; it imports the SDK only when the deployment turned
tracing on (``CALLGATE_TRACING=1``).
"""

from __future__ import annotations

from typing import Any

from callgate.config import Settings


def start_tracing(service: str, settings: Settings | None = None) -> Any:
    """Trace this process as ``callgate-<service>`` if the deployment asks; a handle for
    `stop_tracing` (None when off).  `TracingConfigError` for an ``OTEL_*`` setting callgate
    cannot honour."""
    settings = settings or Settings()
    if not settings.tracing:
        return None
    from callgate.telemetry import setup

    return setup.start(service, enabled=True, content=settings.trace_content)


def stop_tracing(handle: Any) -> None:
    """Flush and stop what `start_tracing` started (nothing when it was off)."""
    if handle is not None:
        from callgate.telemetry import setup

        setup.stop(handle)
