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
from redis.asyncio.connection import SSLConnection, parse_url

from callgate.config import Settings

START_RUN = "start_run"
"""The ingress job that creates a run (job id = run id)."""


def queue_name(settings: Settings) -> str:
    """The arq queue, namespaced by the key prefix so deployments sharing a Redis never mix."""
    return f"{settings.key_prefix}:arq"


TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
)
"""The TLS options of a ``rediss://`` URL's query that arq's `RedisSettings` carries."""


def redis_settings(settings: Settings) -> RedisSettings:
    """arq's connection settings from the one ``REDIS_URL``, read exactly as redis-py reads it.

    arq's own ``RedisSettings.from_dsn`` drops the query and does not decode the user and
    password: a ``rediss://…?ssl_ca_certs=…&ssl_check_hostname=true`` URL would connect with
    the system's CAs and no host name check, and ``p%40ss`` would be sent as is.  A TLS option
    arq cannot carry, or one on a plain ``redis://`` URL, is refused rather than dropped.
    """
    url: dict[str, Any] = dict(parse_url(settings.redis_url))
    tls = url.pop("connection_class", None) is SSLConnection
    options = {name: value for name, value in url.items() if name.startswith("ssl_")}
    if options and not tls:
        raise ValueError(f"TLS options {sorted(options)} on a plain URL: use rediss://")
    if unknown := sorted(set(options) - set(TLS_OPTIONS)):
        raise ValueError(f"arq cannot carry the TLS options {unknown} of REDIS_URL")
    return RedisSettings(
        host=url.get("host", "localhost"),
        port=url.get("port", 6379),
        unix_socket_path=url.get("path"),
        database=url.get("db", 0),
        username=url.get("username"),
        password=url.get("password"),
        ssl=tls,
        **options,
    )


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
