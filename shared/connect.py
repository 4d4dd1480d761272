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

A Redis Cluster is named by ``redis+cluster://[user:password@]host:port[,host:port…]``
(`CLUSTER_URL`), or by a ``redis://`` URL of any one node with ``CALLGATE_REDIS_CLUSTER=1``
(`callgate.config`): its client (`RedisCluster`) learns the slot map from those nodes, sends
each command to the master of its key's slot, follows MOVED and ASK, and after a failover
relearns the map on its next error.  Every key of a run carries its partition's hash tag
(`callgate.keys`), so each step still touches one slot; what must stay on one connection
(a transaction, a ``WAIT``) goes to that slot's master through `slot_client`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from callgate.keys import slot_of

"""What callgate speaks to: one Redis (or Sentinel's master), or a Redis Cluster."""


HEALTH_CHECK_S = 5
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
SENTINEL_TIMEOUT_S = 2.0
"""How long a question to one sentinel may take before the next is asked."""
CONNECT_TIMEOUT_S = 5.0
"""How long a cluster client waits for a node to accept a connection: it relearns the slot map
from node after node while a master fails over, and a node that never answers must not hold
every command behind that for ever."""
CLUSTER_SCHEME = "redis+cluster"
CLUSTER_URL = "redis+cluster:// then [user:password@]host:port[,host:port…]"
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
    parts = _split(url, SENTINEL_SCHEME)
    if parts is None:
        return None
    hosts, path, (username, password), extra = parts
    if extra:
        raise _bad("no query or fragment is read (TLS and sentinel passwords are not supported)")
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


def _bad(reason: str, form: str = SENTINEL_URL) -> ValueError:
    kind = "Sentinel" if form == SENTINEL_URL else "Cluster"
    return ValueError(f"bad {kind} URL: {reason}; expected {form}")


def _noun(form: str) -> str:
    return "sentinel" if form == SENTINEL_URL else "node"


def _split(url: str, scheme: str) -> tuple[str, str, tuple[str | None, str | None], bool] | None:
    """``url`` with ``scheme`` as its hosts, its path, its login, and whether it has a query
    or fragment; None for another scheme."""
    name, found, rest = url.partition("://")
    if not found or name.lower() != scheme:
        return None
    location, _, query = rest.partition("?")
    netloc, _, path = location.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    return hosts, path, _login(auth) if at else (None, None), bool(query) or "#" in location


def _login(auth: str) -> tuple[str | None, str | None]:
    user, colon, password = auth.partition(":")
    return unquote(user) or None, unquote(password) if colon else None


def _host(
    part: str, default_port: int = SENTINEL_PORT, form: str = SENTINEL_URL
) -> tuple[str, int]:
    try:
        split = urlsplit(f"//{part}")
        host, port = split.hostname, split.port
    except ValueError:
        raise _bad(f"the {_noun(form)} {part!r} has a bad port", form) from None
    if not host:
        raise _bad(f"a {_noun(form)} host is empty", form)
    return host, port or default_port


@dataclass(frozen=True)
class ClusterAddress:
    """A ``redis+cluster://`` URL, read: the nodes to learn the cluster from, and as whom."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


def cluster_address(url: str) -> ClusterAddress | None:
    """``url`` read as a Cluster URL; None for any other scheme.  `ValueError` says what is
    wrong in one line, without the password."""
    parts = _split(url, CLUSTER_SCHEME)
    if parts is None:
        return None
    hosts, path, (username, password), extra = parts
    if extra or path.strip("0"):
        raise _bad(
            "no query, fragment or database is read (a cluster has database 0 only)", CLUSTER_URL
        )
    nodes = tuple(_host(part, 6379, CLUSTER_URL) for part in hosts.split(","))
    return ClusterAddress(nodes=nodes, username=username, password=password)


def as_cluster_url(url: str) -> str:
    """A ``redis://`` URL of one node as the Cluster URL of its cluster
    (``CALLGATE_REDIS_CLUSTER=1``); `ValueError` for a scheme a cluster is not reached by."""
    scheme, found, rest = url.partition("://")
    if scheme.lower() == CLUSTER_SCHEME:
        return url
    if not found or scheme.lower() != "redis":
        raise _bad(f"CALLGATE_REDIS_CLUSTER=1 takes a redis:// URL, not {scheme}://", CLUSTER_URL)
    return f"{CLUSTER_SCHEME}://{rest}"


def redis_client(url: str) -> RedisClient:
    """An asyncio client for ``url`` (one pool; commands connect lazily): the master's, found
    through the sentinels, for a Sentinel URL."""
    cluster = cluster_address(url)
    if cluster is not None:
        return cluster_client(cluster)
    address = sentinel_address(url)
    if address is not None:
        return sentinel_client(address)
    client: aioredis.Redis = aioredis.Redis.from_url(url, **OPTIONS)
    return client


def cluster_client(address: ClusterAddress) -> ClusterClient:
    """The client of ``address``'s cluster: it asks the nodes for the slot map on first use."""
    # redis-py's command mixins declare a `connection_pool` a cluster client has none of.
    return ClusterClient(  # type: ignore[abstract]
        startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],
        username=address.username,
        password=address.password,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        **OPTIONS,
    )


class ClusterClient(RedisCluster):
    """redis-py's cluster client, which also keeps a plain client per master (`slot_client`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.login: dict[str, str | None] = {n: kwargs.get(n) for n in ("username", "password")}
        self.slot_clients: dict[str, aioredis.Redis] = {}

    async def master_of(self, slot: int) -> aioredis.Redis:
        """A plain client of the master that holds ``slot`` (see `slot_client`)."""
        await self.initialize()  # the slot map, learnt once (again after an error)
        node = self.nodes_manager.get_node_from_slot(slot)
        client = self.slot_clients.get(node.name)
        if client is None:
            client = aioredis.Redis(
                host=node.host,
                port=int(node.port),
                username=self.login["username"],
                password=self.login["password"],
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                **OPTIONS,
            )
            self.slot_clients[node.name] = client
        return client

    async def aclose(self) -> None:
        await super().aclose()
        clients, self.slot_clients = self.slot_clients, {}
        for client in clients.values():
            await client.aclose()


async def slot_client(redis: RedisClient, key: str) -> aioredis.Redis:
    """A client whose every command goes to the one server holding ``key``: ``redis`` itself,
    or on a cluster the master of ``key``'s slot.  A transaction or a ``WAIT`` must run on one
    connection to that server, which a cluster client's pipeline does not give; a resharding
    meanwhile answers MOVED, and a failover a lost connection, errors the caller retries
    (the cluster client relearns the slot map on its next error)."""
    return redis if isinstance(redis, aioredis.Redis) else await redis.master_of(slot_of(key))


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


RedisClient = aioredis.Redis | ClusterClient
"""What callgate speaks to: one Redis (or Sentinel's master), or a Redis Cluster."""


ELSEWHERE = ("MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "READONLY ")
"""The starts of the errors a cluster node answers a command it did not run with, because the
slot is (for now) served elsewhere: moved, being moved, or its master just failed."""


def served_elsewhere(reply: object) -> bool:
    """Whether ``reply`` is one of `ELSEWHERE`'s errors: sending it again later is safe."""
    return isinstance(reply, ResponseError) and str(reply).startswith(ELSEWHERE)


def script(redis: RedisClient, source: str) -> AsyncScript:
    """A Lua script of ``redis`` (EVALSHA, loaded again after NOSCRIPT): redis-py types its
    script object for one server's client only, though a cluster's takes the same two
    commands, each sent to the master of the script's first key."""
    return AsyncScript(redis, source)  # type: ignore[arg-type]


class SentinelRedis(aioredis.Redis):
    """A master's client that also closes its connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()
