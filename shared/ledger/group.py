"""Group commit: the ledger steps one event-loop iteration issues go as one script call.

A worker runs many messages at once, and each settles with a step (`Tx`): the executor that
read ten exec messages takes ten calls in the same loop iteration.  `AutoPipeline` already
sends them in one round trip; here they also become one ``EVALSHA`` of ``apply.lua`` per
cluster slot, which applies them one after another.  What that saves is Redis's own work
around every script call (finding the script, setting up its arguments, converting its
reply) and one command per step.  What does not change: each step is applied whole or not at
all on its own (the script runs each in a protected call, and a failed guard or refused op
stops that step alone), and each caller gets its step's own reply or error.  A script call
never spans two slots, so a cluster takes the group as it took each step.

A step is sent as ``("apply", tx)``; `merge_steps` turns a flush's steps into the script
calls, and each caller's future gets its steps' replies when the call's reply is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import ResponseError

from callgate.ledger.tx import Arg, Tx
from callgate.ledger.wire import Replies

APPLY_LUA = (resources.files("callgate.ledger.lua") / "apply.lua").read_text(encoding="utf-8")
APPLY_SHA = hashlib.sha1(APPLY_LUA.encode()).hexdigest()
MAX_GROUP_STEPS = 32
"""Steps in one script call at most: Redis runs a script alone, so a bigger group would hold
every other client back longer (a step takes it some tens of microseconds)."""
_FAILED = 2
"""A step's reply code for an error: its op check's refusal (``CGTX …``) or Redis's own."""

Request = tuple[Sequence[tuple[Any, ...]], Replies]


def step_command(txs: Sequence[Tx]) -> tuple[Any, ...]:
    """One ``EVALSHA`` applying ``txs`` in order: a header of six bytes a step (its number of
    keys and of arguments), every step's keys and arguments, last their names (MONITOR)."""
    header = bytearray()
    keys: list[str] = []
    argv: list[Arg] = [b""]
    for tx in txs:
        tx_keys, tx_argv = tx.encode()
        header += len(tx_keys).to_bytes(2, "big") + len(tx_argv).to_bytes(4, "big")
        keys += tx_keys
        argv += tx_argv
    argv[0] = bytes(header)
    argv.append("+".join(tx.step for tx in txs))
    return ("evalsha", APPLY_SHA, len(keys), *keys, *argv)


def step_replies(reply: Any, steps: int) -> list[Any]:
    """A script call's reply as each step's: its own reply, or a `ResponseError` in its place
    (the call's own error, e.g. NOSCRIPT, stands in for every step's)."""
    if isinstance(reply, Exception):
        return [reply] * steps
    if not isinstance(reply, list) or len(reply) != steps:
        return [ResponseError(f"unexpected script reply {reply!r:.200}")] * steps
    return [_step_reply(r) for r in reply]


def _step_reply(reply: Any) -> Any:
    if isinstance(reply, list) and reply and reply[0] == _FAILED:
        message = reply[1]
        return ResponseError(message.decode() if isinstance(message, bytes) else str(message))
    return reply


def merge_steps(batch: Sequence[Request], *, group: bool = True) -> list[Request]:
    """``batch`` with the requests made of steps merged by slot into script calls of at most
    `MAX_GROUP_STEPS` steps.  A request of steps of several slots, and every step when not
    ``group`` (one script call a step: how `callgate bench` charges each step its cost),
    goes one step a script call."""
    out: list[Request] = []
    pools: dict[int | None, list[tuple[list[Tx], Replies]]] = {}
    for commands, replies in batch:
        if not commands or commands[0][0] != "apply":
            out.append((commands, replies))
            continue
        txs: list[Tx] = [command[1] for command in commands]
        slot = txs[0].slot
        if group and all(tx.slot == slot for tx in txs):
            pools.setdefault(slot, []).append((txs, replies))
        else:
            alone = _Split([(txs, replies)], [1] * len(txs))
            out.append(([step_command([tx]) for tx in txs], alone))
    for requests in pools.values():
        members: list[tuple[list[Tx], Replies]] = []
        size = 0
        for txs, replies in requests:
            if members and size + len(txs) > MAX_GROUP_STEPS:
                out.append(_group(members))
                members, size = [], 0
            members.append((txs, replies))
            size += len(txs)
        out.append(_group(members))
    return out


def _group(requests: list[tuple[list[Tx], Replies]]) -> Request:
    txs = [tx for request, _ in requests for tx in request]
    return [step_command(txs)], _Split(requests, [len(txs)])


class _Split:
    """The replies of script calls (``steps``: how many steps each carried), handed to the
    requests whose steps they carried, in order: it takes them as a future would (`Replies`),
    so the wire needs no second path."""

    __slots__ = ("_done", "_requests", "_steps")

    def __init__(self, requests: list[tuple[list[Tx], Replies]], steps: list[int]) -> None:
        self._requests = [(len(txs), replies) for txs, replies in requests]
        self._steps = steps
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: list[Any]) -> None:
        self._done = True
        steps = [
            r for reply, n in zip(result, self._steps, strict=True) for r in step_replies(reply, n)
        ]
        start = 0
        for n, replies in self._requests:
            if not replies.done():  # else its caller stopped waiting
                replies.set_result(steps[start : start + n])
            start += n

    def set_exception(self, exception: BaseException) -> None:
        self._done = True
        for _, replies in self._requests:
            if not replies.done():
                replies.set_exception(exception)

    def cancel(self) -> bool:
        self._done = True
        for _, replies in self._requests:
            replies.cancel()
        return True
