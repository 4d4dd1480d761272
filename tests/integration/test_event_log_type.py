"""A run's event log is the one key of a run that another role may write: the api user's
SETNX, ZADD and XADD reach ``events:*`` (its refusal events go there).  So a step asks its
TYPE before writing, except where its guards prove the run live: a live run's log is the
stream `start_run` wrote, and only the steps that revive an ended run (whose keys may have
expired one by one) must look again.  Each test plants another type where that can happen."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.errors import TxRejectedError
from callgate.keys import Keys
from callgate.ledger.approval_steps import Decider
from callgate.ledger.store import Ledger
from callgate.records import RunRecord
from callgate.states import RunState

RUN = "run-events-type"


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.key_prefix, settings.partitions)


@pytest.fixture
def ledger(redis: aioredis.Redis, keys: Keys, settings: Settings) -> Ledger:
    return Ledger(redis, keys, settings)  # keys: this test's own prefix


def _run() -> RunRecord:
    return RunRecord(run_id=RUN, api="openai-responses", model="m", input="hi")


async def test_an_event_log_planted_before_the_run_stops_its_start_before_the_first_write(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    events, turns = keys.events(RUN), keys.run_stream("turns", RUN)
    await redis.zadd(events, {"planted": 1})
    with pytest.raises(TxRejectedError, match="xadd: key holds a zset"):
        await ledger.apply(ledger.start_run(_run(), [{"role": "user", "content": "hi"}]))
    assert await redis.exists(keys.run(RUN), keys.history(RUN), turns) == 0
    assert await redis.zscore(keys.runs_index(0, None), RUN) is None


async def test_an_event_log_that_expired_before_its_run_is_checked_when_a_person_resumes_it(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    """A handed-off run's keys expire one by one: with its log gone and a zset planted there,
    the resume is refused whole — the run stays handed off and keeps its expiry."""
    assert (await ledger.apply(ledger.start_run(_run(), []))).ok
    run = await ledger.get_run(RUN)
    assert run is not None
    assert (await ledger.apply(await ledger.end_run(run, RunState.HANDED_OFF, "budget"))).ok
    run = await ledger.get_run(RUN)
    assert run is not None and await redis.ttl(keys.run(RUN)) > 0
    await redis.delete(keys.events(RUN))  # expired first
    await redis.zadd(keys.events(RUN), {"planted": 1})
    decider = Decider(person="carol", signer="carol", token="t", jti="j-1")
    resume = await ledger.resume_run(
        run,
        decider,
        turn=run.turn + 1,
        max_turns=5,
        deadline_ms=None,
        max_total_tokens=None,
        msg_id="m-1",
    )
    with pytest.raises(TxRejectedError, match="key holds a zset"):
        await ledger.apply(resume)
    assert await redis.hget(keys.run(RUN), "status") == b"handed_off"
    assert await redis.ttl(keys.run(RUN)) > 0
