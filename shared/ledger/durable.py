"""What must hold a write's ``executing`` intent before its request goes out (DESIGN §13).

Redis replicates asynchronously and by default fsyncs once a second, so a take the executor
saw applied can still be lost by a failover or a crash of the machine — after the request it
announced went out, leaving an effect no ledger record speaks of.  ``CALLGATE_WRITE_DURABILITY``
says what the executor waits for first (`callgate.config.Settings.write_durability`):

* ``none``: nothing beyond Redis's own persistence (today's behaviour);
* ``replica``: the take of a write goes over a connection of its own followed by ``WAIT 1
  <durability_wait_ms>`` (WAIT counts the writes of the connection that made them, so it must
  be that one: `confirming_pipe`); no replica confirming in time, nothing is sent;
* ``fsync``: executors start only on a Redis that runs ``appendonly yes`` and ``appendfsync
  always`` (`check_durability`), where a step's reply means it is on disk.
"""

from __future__ import annotations

from redis.exceptions import NoPermissionError

from callgate.config import Settings
from callgate.connect import ClusterClient, RedisClient
from callgate.errors import DurabilityError
from callgate.ledger.pipeline import AutoPipeline

REPLICAS = 1
"""How many replicas must confirm a write's intent (WAIT's first argument)."""


def confirming_pipe(redis: RedisClient, settings: Settings) -> AutoPipeline | None:
    """The pipeline whose flushes end with WAIT, for ``replica``; None otherwise."""
    if settings.write_durability != "replica":
        return None
    confirm = (REPLICAS, settings.durability_wait_ms)
    return AutoPipeline(redis, settings.wire, group=settings.group_steps, confirm=confirm)


async def check_durability(redis: RedisClient, settings: Settings) -> None:
    """`DurabilityError` when Redis cannot give what ``write_durability`` asks, or this
    worker's Redis user may not check it: an executor must not start then.  On a cluster
    every master must fsync every write."""
    mode = settings.write_durability
    if mode == "replica":
        try:
            await redis.wait(0, 1)  # answers at once: is WAIT allowed?
        except NoPermissionError:
            raise DurabilityError(_grant(mode, "+wait", "WAIT for a replica")) from None
    if mode != "fsync":
        return
    try:
        if isinstance(redis, ClusterClient):
            found = await redis.config_get("append*", target_nodes=ClusterClient.PRIMARIES)
        else:
            found = {"Redis": await redis.config_get("append*")}
    except NoPermissionError:
        raise DurabilityError(
            _grant(mode, "+config|get", "read appendonly and appendfsync (CONFIG GET)")
        ) from None
    for server, config in found.items():
        values = {_text(k): _text(v) for k, v in config.items()}
        appendonly, appendfsync = values.get("appendonly"), values.get("appendfsync")
        if (appendonly, appendfsync) != ("yes", "always"):
            raise DurabilityError(
                f"CALLGATE_WRITE_DURABILITY=fsync needs Redis to fsync every write, and "
                f"{server} runs appendonly {appendonly}, appendfsync {appendfsync}: set "
                "appendonly yes and appendfsync always (redis.conf), or use replica"
            )


def _grant(mode: str, permission: str, what: str) -> str:
    return (
        f"CALLGATE_WRITE_DURABILITY={mode} needs to {what}, which this worker's Redis user may "
        f"not: grant it {permission} (users.acl, or ACL SETUSER <user> {permission})"
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
