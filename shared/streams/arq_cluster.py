"""arq on a Redis Cluster: each queue's keys in one slot, its connections to that slot's master.

arq speaks to one server and keeps a job in several keys (``arq:job:ID``, ``arq:in-progress:ID``,
``arq:retry:ID``, ``arq:result:ID``) beside the queue's sorted set, which it reads under WATCH and
changes in MULTI.  A cluster runs such a transaction only when every key is in one slot.  So on
a cluster every job id of a queue ends with the queue's name as a hash tag (`cluster_job_id`:
``run-1{cg:arq}``; at the end, so a tenant's ``acme.`` prefix still opens it for the tenant's
ACL globs), which puts all of its keys in the slot of the queue's own key; the worker's health
key is tagged the same way.  arq also removes every job it finishes from its abort set
(``arq:abort``, in no queue's slot) inside that job's transaction; callgate never aborts a
job (``allow_abort_jobs`` stays off, so nothing is ever added to that set), and on a cluster
the removal is sent to the queue's own abort set instead
(`SlotMasterConnection.pack_command`).  An arq client of the queue (`queue_pool`) connects to
the master of that slot, asking the cluster where it is on every (re)connect: after a failover or a
resharding the old master answers ``READONLY``, ``ASK`` or ``MOVED`` (or nothing), the
connection drops with `ConnectionError`, and the command is sent again on a new one
(`SLOT_RETRIES`), as a Sentinel-managed connection does.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from arq.connections import ArqRedis
from arq.constants import abort_jobs_ss, health_check_key_suffix
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, ResponseError

from callgate.config import Settings
from callgate.connect import (
    OPTIONS,
    ClusterClient,
    cluster_address,
    cluster_client,
    served_elsewhere,
)
from callgate.keys import slot_of

SLOT_RETRIES = 8
"""A command the slot's master did not run (the slot moved, is moving or fails over) is sent
again this many times, 0.05 s to 0.5 s apart (about 3 s in all), each on a connection to the
master the cluster then names."""


def on_cluster(settings: Settings) -> bool:
    return cluster_address(settings.redis_url) is not None


def cluster_job_id(settings: Settings, queue: str, job_id: str) -> str:
    """``job_id`` as arq's id on ``queue``: with the queue's hash tag on a cluster."""
    return f"{job_id}{{{queue}}}" if on_cluster(settings) else job_id


def plain_job_id(job_id: str) -> str:
    """An arq job id without the queue's hash tag a cluster adds (`cluster_job_id`)."""
    return job_id.split("{", 1)[0] if job_id.endswith("}") else job_id


def health_check_key(settings: Settings, queue: str) -> str | None:
    """The worker's health key, in its queue's slot on a cluster (None: arq's own)."""
    return f"{{{queue}}}{health_check_key_suffix}" if on_cluster(settings) else None


class SlotMasterConnection(aioredis.Connection):
    """A connection to whichever master holds a slot, looked up on every (re)connect."""

    def __init__(self, *, cluster: ClusterClient, queue: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cluster = cluster
        self._slot = slot_of(queue)
        self._abort_set = f"{{{queue}}}:abort"

    def pack_command(self, *args: Any) -> list[bytes]:
        if len(args) > 1 and args[0] == "ZREM" and args[1] == abort_jobs_ss:
            args = (args[0], self._abort_set, *args[2:])  # the module's doc says why
        return super().pack_command(*args)

    async def connect(self) -> None:
        if self.is_connected:
            return
        manager = self._cluster.nodes_manager
        await manager.initialize()  # the slot map now, not what it was before a failover
        node = manager.get_node_from_slot(self._slot)
        self.host, self.port = node.host, int(node.port)
        await super().connect()  # type: ignore[no-untyped-call]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if served_elsewhere(exc):
                await self.disconnect()
                raise ConnectionError(f"the slot moved: {exc}") from exc
            raise


class SlotMasterPool(aioredis.ConnectionPool):
    """The connections to the master of one queue's slot; its own cluster client finds it."""

    def __init__(self, cluster: ClusterClient, queue: str) -> None:
        super().__init__(
            connection_class=SlotMasterConnection,
            cluster=cluster,
            queue=queue,
            username=cluster.login["username"],
            password=cluster.login["password"],
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), SLOT_RETRIES),
            retry_on_error=[ConnectionError],
            **OPTIONS,
        )
        self.cluster = cluster

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        await self.cluster.aclose()


def queue_pool(settings: Settings, queue: str, **arq_options: Any) -> ArqRedis:
    """An arq client of ``queue`` on the cluster ``settings`` name (see the module's doc)."""
    address = cluster_address(settings.redis_url)
    if address is None:
        raise ValueError("queue_pool is for a Redis Cluster (redis+cluster://)")
    pool = SlotMasterPool(cluster_client(address), queue)
    return ArqRedis(pool, default_queue_name=queue, **arq_options)
