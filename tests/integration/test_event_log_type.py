"""A run's event log is the one key of a run that another role may write: the api user's
SETNX, ZADD and XADD reach ``events:*`` (its refusal events go there).  So a step asks its TYPE
before writing, except where its guards prove that one of the run's records exists: the log
outlives them all."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.errors import TxRejectedError
from callgate.keys import Keys
from callgate.ledger.approval_steps import Decider
from callgate.ledger.base import LOG_OUTLIVES_S
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


async def test_a_runs_log_outlives_every_record_of_it_so_a_step_on_a_record_finds_its_log(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    """A step that guards a field of a run's record (its run hash, a call's) skips the TYPE
    of the run's log: the log outlives every record, so the record's existence proves the
    log's, and nobody can change a stream's type.  Once the run ends, each of its keys
    expires, and the log `LOG_OUTLIVES_S` after the last of the others."""
    assert (await ledger.apply(ledger.start_run(_run(), []))).ok
    run = await ledger.get_run(RUN)
    assert run is not None
    assert (await ledger.apply(await ledger.end_run(run, RunState.HANDED_OFF, "budget"))).ok
    log = keys.events(RUN)
    others = [key for key in ledger.run_keys(RUN, [], []) if key != log]
    ttls = {key: await redis.pttl(key) for key in others if await redis.exists(key)}
    assert keys.run(RUN) in ttls and all(ttl > 0 for ttl in ttls.values())
    assert await redis.pttl(log) > max(ttls.values()) + LOG_OUTLIVES_S * 1000 // 2

    # A person resumes it while its records live: the log is there, as a stream.
    run = await ledger.get_run(RUN)
    assert run is not None
    decider = Decider(person="carol", signer="carol", token="t", jti="j-1")
    resume = await ledger.resume_run(
        run, decider, turn=run.turn + 1, max_turns=5, deadline_ms=None,
        max_total_tokens=None, msg_id="m-1",
    )  # fmt: skip
    assert (await ledger.apply(resume)).ok
    assert await redis.hget(keys.run(RUN), "status") == b"awaiting_model"
    assert await redis.pttl(keys.run(RUN)) == -1 and await redis.pttl(log) == -1
