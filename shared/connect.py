"""The one way callgate opens a Redis client: from the deployment's URL, alive-checked.

Every process (workers, the Slack bot, `CallgateClient`) connects through here, so a setting
about connections is made once: keepalives and a health check, so a silently dropped
connection is noticed; and no ``CLIENT SETINFO`` on connect, which a locked-down deployment's
ACL users are not granted (deploy/redis/users.acl) and Redis before 7.2 does not know.
``rediss://`` URLs (TLS, with ``ssl_ca_certs``/``ssl_check_hostname`` in the query) work as
redis-py reads them.

A Redis Sentinel deployment is named by
``redis+sentinel://[user:password@]host:port[,host:port…]/master-name[/db]`` (`SENTINEL_URL`):
the hosts are the sentinels (port 26379 if left out), the user and password those of the
master.  Its client asks the sentinels where the master is on every (re)connect, and a
connection that meets a demoted master (``READONLY``) is dropped and raises `ConnectionError`
(redis-py's `SentinelConnectionPool`), so after a failover a worker's usual back-off and retry
lands on the new master.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

HEALTH_CHECK_S = 5
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
SENTINEL_TIMEOUT_S = 2.0
"""How long a question to one sentinel may take before the next is asked."""
SENTINEL_URL = "redis+sentinel:// then [user:password@]host:port[,host:port…]/master-name[/db]"
"""The form of a Sentinel URL, as an error message shows it (split after the scheme, or the
log's URL masking would take the form's own ``password`` for one)."""

OPTIONS: dict[str, Any] = {
    "health_check_interval": HEALTH_CHECK_S,
    "socket_keepalive": True,
    "lib_name": None,
    "lib_version": None,
}
"""What every connection is opened with (the module docstring says why)."""


@dataclass(frozen=True)
class SentinelAddress:
    """A ``redis+sentinel://`` URL, read: where to ask, for which master, as whom."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    """The name the sentinels monitor the master under (``sentinel monitor <name> …``)."""
    db: int = 0
    username: str | None = None
    password: str | None = None


def sentinel_address(url: str) -> SentinelAddress | None:
    """``url`` read as a Sentinel URL; None for any other scheme.  `ValueError` says what is
    wrong in one line, without the password."""
    scheme, found, rest = url.partition("://")
    if not found or scheme.lower() != SENTINEL_SCHEME:
        return None
    location, _, query = rest.partition("?")
    if query or "#" in location:
        raise _bad("no query or fragment is read (TLS and sentinel passwords are not supported)")
    netloc, _, path = location.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    username, password = _login(auth) if at else (None, None)
    master, _, db = path.partition("/")
    if not master:
        raise _bad("no master name after the hosts")
    if not db.isdigit() and db != "":
        raise _bad(f"the database {db!r} is not a number")
    return SentinelAddress(
        sentinels=tuple(_host(part) for part in hosts.split(",")),
        master=unquote(master),
        db=int(db or 0),
        username=username,
        password=password,
    )


def _bad(reason: str) -> ValueError:
    return ValueError(f"bad Sentinel URL: {reason}; expected {SENTINEL_URL}")


def _login(auth: str) -> tuple[str | None, str | None]:
    user, colon, password = auth.partition(":")
    return unquote(user) or None, unquote(password) if colon else None


def _host(part: str) -> tuple[str, int]:
    try:
        split = urlsplit(f"//{part}")
        host, port = split.hostname, split.port
    except ValueError:
        raise _bad(f"the sentinel {part!r} has a bad port") from None
    if not host:
        raise _bad("a sentinel host is empty")
    return host, port or SENTINEL_PORT


def redis_client(url: str) -> aioredis.Redis:
    """An asyncio client for ``url`` (one pool; commands connect lazily): the master's, found
    through the sentinels, for a Sentinel URL."""
    address = sentinel_address(url)
    if address is not None:
        return sentinel_client(address)
    client: aioredis.Redis = aioredis.Redis.from_url(url, **OPTIONS)
    return client


def sentinel_client(address: SentinelAddress) -> aioredis.Redis:
    """The client of ``address``'s master: every new connection asks the sentinels first."""
    asking = {**OPTIONS, "socket_connect_timeout": SENTINEL_TIMEOUT_S}
    asking["socket_timeout"] = SENTINEL_TIMEOUT_S
    manager = Sentinel(list(address.sentinels), sentinel_kwargs=asking)  # type: ignore[no-untyped-call]
    client: aioredis.Redis = manager.master_for(
        address.master,
        redis_class=SentinelRedis,
        db=address.db,
        username=address.username,
        password=address.password,
        **OPTIONS,
    )
    return client


class SentinelRedis(aioredis.Redis):
    """A master's client that also closes its connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()
