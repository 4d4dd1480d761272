"""Group commit against a real Redis: the steps one event-loop iteration issues go as one
script call per slot, and each is still applied or refused on its own, with its own reply."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from callgate.config import Settings
from callgate.errors import TxRejectedError
from callgate.keys import Keys
from callgate.ledger.store import Ledger, Tx

LAST_ID = "18446744073709551615-18446744073709551615"
"""A stream whose last entry has this id takes no XADD '*' ever again: the one write error
a step's checks cannot foresee."""


class Own:
    """This test's own keys, in slot ``{g}`` (or another: ``other``)."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex

    def __call__(self, name: str, slot: str = "g") -> str:
        return f"{{{slot}}}{self.tag}:{name}"


@pytest.fixture
def ledger(redis: aioredis.Redis, settings: Settings) -> Ledger:
    return Ledger(redis, Keys(settings.key_prefix, settings.partitions), settings)


async def _script_calls(redis: aioredis.Redis, ledger: Ledger) -> int:
    """EVALSHAs so far, after a step of its own has loaded the script (NOSCRIPT is answered
    by loading it and sending the step again)."""
    await ledger.apply(Tx().hset(Own()("loaded"), {"f": "1"}))
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def _write(key: str, log: str, guard: str | None = None) -> Tx:
    tx = Tx("a_step")
    if guard is not None:
        tx.expect(key, "state", guard)
    return tx.hset(key, {"state": "done"}).xadd(log, {"from": key})


async def test_steps_issued_together_go_as_one_script_call_each_judged_alone(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    k = Own()
    await redis.hset(k("b"), "state", "taken")
    before = await _script_calls(redis, ledger)
    first, lost, third = await asyncio.gather(
        ledger.apply(_write(k("a"), k("log"))),
        ledger.apply(_write(k("b"), k("log"), guard="free")),  # fails: nothing of it lands
        ledger.apply(_write(k("c"), k("log"))),
    )
    assert await _script_calls(redis, ledger) - before == 1 + 1  # theirs, the count's own
    assert (first.ok, lost.ok, third.ok) == (True, False, True)
    assert lost.actual == "taken"
    assert await redis.hget(k("b"), "state") == b"taken"
    logged = [fields[b"from"].decode() for _, fields in await redis.xrange(k("log"))]
    assert logged == [k("a"), k("c")]
    assert first.stream_ids != third.stream_ids


async def test_a_step_its_checks_refuse_fails_alone_in_its_group(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    k = Own()
    await redis.rpush(k("list"), "x")
    results = await asyncio.gather(
        ledger.apply(_write(k("a"), k("log"))),
        ledger.apply(_write(k("list"), k("log"))),  # an HSET on a list: refused, unwritten
        ledger.apply(_write(k("c"), k("log"))),
        return_exceptions=True,
    )
    assert isinstance(results[1], TxRejectedError)
    assert [getattr(r, "ok", None) for r in (results[0], results[2])] == [True, True]
    assert await redis.lrange(k("list"), 0, -1) == [b"x"]
    assert await redis.xlen(k("log")) == 2


async def test_a_write_error_inside_one_step_does_not_stop_the_steps_after_it(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    k = Own()
    await redis.xadd(k("full"), {"f": "v"}, id=LAST_ID)
    stuck = Tx("a_step").hset(k("b"), {"state": "done"}).xadd(k("full"), {"f": "w"})
    results = await asyncio.gather(
        ledger.apply(_write(k("a"), k("log"))),
        ledger.apply(stuck),
        ledger.apply(_write(k("c"), k("log"))),
        return_exceptions=True,
    )
    assert isinstance(results[1], ResponseError)
    assert not isinstance(results[1], TxRejectedError)
    assert [getattr(r, "ok", None) for r in (results[0], results[2])] == [True, True]
    assert await redis.hget(k("c"), "state") == b"done"


async def test_steps_of_different_slots_never_share_a_script_call(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    k = Own()
    before = await _script_calls(redis, ledger)
    one, other, both = await asyncio.gather(
        ledger.apply(Tx().hset(k("a"), {"f": "1"})),
        ledger.apply(Tx().hset(k("a", slot="h"), {"f": "1"})),
        ledger.apply_many([Tx().hset(k("b"), {"f": "1"}), Tx().hset(k("b", slot="h"), {"f": "1"})]),
    )
    assert one.ok and other.ok and all(r.ok for r in both)
    # One call a slot for the lone steps, and the request of both slots sends each of its
    # steps alone: four calls (and the count's own), none mixing the two slots.
    assert await _script_calls(redis, ledger) - before == 4 + 1
    assert await redis.hget(k("b", slot="h"), "f") == b"1"


async def test_a_groups_acks_go_as_one_xack_and_only_for_the_steps_that_applied(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    """Each step acks the message it handled; the group's acks of one stream go as one XACK,
    and a message whose step was refused or failed stays pending, to come again."""
    k = Own()
    await redis.xgroup_create(k("in"), "g", id="0", mkstream=True)
    for n in range(4):
        await redis.xadd(k("in"), {"n": str(n)})
    delivered = await redis.xreadgroup("g", "me", {k("in"): ">"})
    ids = [entry_id.decode() for entry_id, _ in delivered[0][1]]
    await redis.hset(k("b"), "state", "taken")
    await redis.xadd(k("full"), {"f": "v"}, id=LAST_ID)
    steps = [
        _write(k("a"), k("log")),
        _write(k("b"), k("log"), guard="free"),  # refused
        Tx("a_step").hset(k("c"), {"state": "done"}).xadd(k("full"), {"f": "w"}),  # fails
        _write(k("d"), k("log")),
    ]
    for step, entry_id in zip(steps, ids, strict=True):
        step.vouch(k("in")).xack(k("in"), "g", entry_id)
    acks_before = await _calls_of(redis, "xack")
    results = await asyncio.gather(*(ledger.apply(s) for s in steps), return_exceptions=True)
    assert await _calls_of(redis, "xack") - acks_before == 1
    assert [getattr(r, "ok", None) for r in results] == [True, False, None, True]
    pending = await redis.xpending_range(k("in"), "g", min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == ids[1:3]


async def _calls_of(redis: aioredis.Redis, command: str) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
