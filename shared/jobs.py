"""The arq job contract shared by the ingress worker and every client that enqueues.

Jobs are JSON (orjson), never pickle, so a service in any language can enqueue ``start_run``
by writing arq's job hash itself: ``{"t": try, "f": "start_run", "a": [spec], "k": {},
"et": enqueue_ms}`` under ``arq:job:<run_id>`` and the id into the sorted set
``<prefix>:arq``.  A failed job's result holds ``{"error": type, "message": text}`` instead of a
pickled exception.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from arq.connections import RedisSettings

from callgate.config import Settings

START_RUN = "start_run"
"""The ingress job that creates a run (job id = run id)."""


def queue_name(settings: Settings) -> str:
    """The arq queue, namespaced by the key prefix so deployments sharing a Redis never mix."""
    return f"{settings.key_prefix}:arq"


def redis_settings(settings: Settings) -> RedisSettings:
    """arq's connection settings from the one ``REDIS_URL``."""
    result: RedisSettings = RedisSettings.from_dsn(settings.redis_url)
    return result


def _jsonable(value: Any) -> Any:
    """orjson's fallback: exceptions (a failed job's result) and stray types become JSON."""
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not JSON")


def job_serializer(value: Any) -> bytes:
    return orjson.dumps(value, default=_jsonable)


def job_deserializer(data: bytes) -> Any:
    return orjson.loads(data)
