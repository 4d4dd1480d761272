"""``callgate requeue DEAD_LETTER_ID …``: put dead-lettered messages back on their streams
(`callgate.streams.requeue`), once the workers that refused them are upgraded or fixed.

Ids are the ones `callgate dead-letters` shows.  Exit codes: 0 every one requeued; 3 one is not
a dead letter of a worker's stream (the others are still requeued); 5 Redis did not answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from callgate.client import CallgateClient
from callgate.ops.exits import CONFLICT, OK, with_client
from callgate.ops.stack import progress_to_stderr
from callgate.streams.requeue import requeue


async def cmd_requeue(args: argparse.Namespace) -> int:
    async def act(client: CallgateClient) -> int:
        code = OK
        for entry_id in args.ids:
            problem = await requeue(client.redis, client.keys, entry_id)
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
