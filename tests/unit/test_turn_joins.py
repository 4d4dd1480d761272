"""TurnJoins: a result that arrives while its turn is being joined waits, and joins again only
if that join left the turn waiting."""

from __future__ import annotations

import asyncio

import pytest

from callgate.loop.joins import TurnJoins


class Join:
    """A join whose end the test decides: True (turn settled), False (waiting) or an error."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls
        self.end: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def __call__(self) -> bool:
        self.calls.append(self.name)
        return await self.end


Started = tuple[TurnJoins, list[str], Join, Join, "asyncio.Task[None]", "asyncio.Task[None]"]


async def _second_arrives_during_first() -> Started:
    joins, calls = TurnJoins(), []
    first, second = Join("first", calls), Join("second", calls)
    one = asyncio.create_task(joins.join(("run", 1), first))
    await asyncio.sleep(0)
    two = asyncio.create_task(joins.join(("run", 1), second))
    await asyncio.sleep(0)
    assert calls == ["first"]  # the second waits for the first
    return joins, calls, first, second, one, two


async def _two_results(first_ends: bool | Exception) -> list[str]:
    joins, calls, first, second, one, two = await _second_arrives_during_first()
    if isinstance(first_ends, Exception):
        first.end.set_exception(first_ends)
    else:
        first.end.set_result(first_ends)
    second.end.set_result(True)
    await asyncio.gather(one, two, return_exceptions=True)
    assert len(joins) == 0
    return calls


async def test_a_result_arriving_during_a_join_that_settles_the_turn_does_nothing() -> None:
    assert await _two_results(True) == ["first"]


async def test_a_result_arriving_during_a_join_that_leaves_the_turn_waiting_joins_again() -> None:
    assert await _two_results(False) == ["first", "second"]


async def test_a_failed_join_lets_the_next_result_join() -> None:
    assert await _two_results(ConnectionError("redis went away")) == ["first", "second"]


async def test_other_turns_join_at_once() -> None:
    joins, calls = TurnJoins(), []
    first, other = Join("first", calls), Join("other", calls)
    one = asyncio.create_task(joins.join(("run", 1), first))
    two = asyncio.create_task(joins.join(("run", 2), other))
    await asyncio.sleep(0)
    assert calls == ["first", "other"]
    first.end.set_result(True)
    other.end.set_result(True)
    await asyncio.gather(one, two)


async def test_cancelling_a_waiting_result_leaves_the_running_join_alone() -> None:
    _, calls, first, _, one, two = await _second_arrives_during_first()
    two.cancel()
    with pytest.raises(asyncio.CancelledError):
        await two
    first.end.set_result(True)
    await one
    assert calls == ["first"]
