"""Put a dead-lettered message back on the stream it came on (`callgate requeue`).

A message a worker refused — of a newer ledger schema during a rolling upgrade, or one whose
consumers kept dying while a bug was fixed — waits in its partition's dead letters with the
reason, and its run waits with it.  Requeued, it is added to its stream again, then its dead
letter removed (a crash between leaves it in both: requeued twice, it is handled once, as any
redelivery is); it passes every guard any message passes, so requeueing grants nothing.  Only a
worker's own streams take one back: a webhook delivery given up on is no stream message.
"""

from __future__ import annotations

from typing import Any

from callgate.connect import RedisClient
from callgate.keys import STREAM_KINDS, Keys


async def requeue(redis: RedisClient, keys: Keys, entry_id: str) -> str | None:
    """Put the dead letter ``entry_id`` back on its stream; None, or why it could not."""
    for partition in range(keys.partitions):
        dead = keys.dead_letter(partition)
        found = await redis.xrange(dead, entry_id, entry_id)
        if not found:
            continue
        fields = {_text(k): v for k, v in found[0][1].items()}
        stream = _text(fields.get("stream", b""))
        ours = {s for kind in STREAM_KINDS for s in keys.streams(kind)}
        if stream not in ours or not fields.get("d"):
            return f"{entry_id} came from {stream or 'no stream'}, not a worker's stream"
        await redis.xadd(stream, {"d": fields["d"]})
        await redis.xdel(dead, entry_id)
        return None
    return f"no dead letter {entry_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
