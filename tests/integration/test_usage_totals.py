"""A turn adds its token usage to the run's totals as a compare-and-set on the totals it read:
a step built on stale totals (a stale carried record, a redelivery) is refused and told apart
from a lost race, never a lost update."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.keys import Keys
from callgate.ledger.binding import Binding
from callgate.ledger.store import Ledger, Tx
from callgate.providers.base import TurnRecord
from callgate.records import RunRecord

RUN = "run-usage"


@pytest.fixture
def ledger(redis: aioredis.Redis, settings: Settings) -> Ledger:
    return Ledger(redis, Keys(settings.key_prefix, settings.partitions), settings)


def _turn(input_tokens: int, output_tokens: int) -> TurnRecord:
    return TurnRecord(
        provider="openai", api="openai-responses", sdk_version="1", api_version=None,
        input_tokens=input_tokens, output_tokens=output_tokens,
    )  # fmt: skip


async def test_usage_adds_to_the_totals_read_and_a_stale_read_is_refused_as_stale(
    ledger: Ledger, redis: aioredis.Redis
) -> None:
    run = RunRecord(run_id=RUN, api="openai-responses", model="m", input="hi")
    assert (await ledger.apply(ledger.start_run(run, []))).ok
    first = ledger.model_response(Tx("t"), run, _turn(10, 5), "final_answer", b"{}")
    assert (await ledger.apply(first)).ok
    read = await ledger.get_run(RUN)
    assert read is not None
    assert (read.usage_input_tokens, read.usage_output_tokens) == (10, 5)

    binding = Binding()
    stale = ledger.model_response(Tx("t"), run, _turn(7, 3), "final_answer", b"{}", binding)
    result = await ledger.apply(stale)
    assert not result.ok and binding.broken(result)
    assert result.actual == "10"
    again = await ledger.get_run(RUN)
    assert again is not None
    assert (again.usage_input_tokens, again.usage_output_tokens) == (10, 5)

    fresh = ledger.model_response(Tx("t"), read, _turn(7, 3), "final_answer", b"{}")
    assert (await ledger.apply(fresh)).ok
    total = await ledger.get_run(RUN)
    assert total is not None
    assert (total.usage_input_tokens, total.usage_output_tokens) == (17, 8)
