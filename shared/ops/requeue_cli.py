"""``callgate requeue DEAD_LETTER_ID …``: put dead-lettered messages back on their streams.

What for: a message a worker refused — of a newer ledger schema during a rolling upgrade, or
one whose consumers kept dying while a bug was fixed — waits in the dead letters with its
reason, and its run waits with it.  Once the workers are upgraded or fixed, an operator puts it
back.  The message is added again to the stream it came on, then its dead letter removed (a
crash between leaves it in both: requeued twice, it is handled once, as every redelivery is);
it then passes every guard any message passes — requeueing grants nothing.  Only
the hot-path streams take one back (a webhook delivery given up on is not a stream message).
Ids are the ones `callgate dead-letters` shows.  Exit codes: 0 every one requeued; 3 one is not
a dead letter (the others still are requeued); 5 Redis did not answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from callgate.client import CallgateClient
from callgate.keys import STREAM_KINDS
from callgate.ops.exits import CONFLICT, OK, with_client
from callgate.ops.stack import progress_to_stderr


async def requeue(client: CallgateClient, entry_id: str) -> str | None:
    """Put the dead letter ``entry_id`` back on its stream; None, or why it could not."""
    keys = client.keys
    for partition in range(keys.partitions):
        dead = keys.dead_letter(partition)
        found = await client.redis.xrange(dead, entry_id, entry_id)
        if not found:
            continue
        fields = {_text(k): v for k, v in found[0][1].items()}
        stream = _text(fields.get("stream", b""))
        ours = {s for kind in STREAM_KINDS for s in keys.streams(kind)}
        if stream not in ours or not fields.get("d"):
            return f"{entry_id} came from {stream or 'no stream'}, not a worker's stream"
        await client.redis.xadd(stream, {"d": fields["d"]})
        await client.redis.xdel(dead, entry_id)
        return None
    return f"no dead letter {entry_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def cmd_requeue(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        code = OK
        for entry_id in args.ids:
            problem = await requeue(client, entry_id)
            if problem is None:
                print(f"requeued {entry_id}")
            else:
                progress_to_stderr(problem)
                code = CONFLICT
        return code

    return await with_client(act)


def add_command(sub: Any) -> None:
    cmd = sub.add_parser(
        "requeue",
        help="put dead-lettered messages back on their streams",
        description="put dead-lettered messages (ids from `callgate dead-letters`) back",
    )
    cmd.add_argument("ids", nargs="+", metavar="DEAD_LETTER_ID")
    cmd.set_defaults(handler=cmd_requeue)
