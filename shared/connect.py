"""The one way callgate opens a Redis client: from the deployment's URL, alive-checked.

Every process (workers, the Slack bot, `CallgateClient`) connects through here, so a setting
about connections is made once: keepalives and a health check, so a silently dropped
connection is noticed; and no ``CLIENT SETINFO`` on connect, which a locked-down deployment's
ACL users are not granted (deploy/redis/users.acl) and Redis before 7.2 does not know.
``rediss://`` URLs (TLS, with ``ssl_ca_certs``/``ssl_check_hostname`` in the query) work as
redis-py reads them.
"""

from __future__ import annotations

import redis.asyncio as aioredis

HEALTH_CHECK_S = 5


def redis_client(url: str) -> aioredis.Redis:
    """An asyncio client for ``url`` (one pool; commands connect lazily)."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        health_check_interval=HEALTH_CHECK_S,
        socket_keepalive=True,
        lib_name=None,
        lib_version=None,
    )
    return client
