"""A tenant's runs index: written with the deployment's in the run's first step, pruned with it
(against a real Redis).  It is what `callgate runs` reads under a tenant's login."""

from __future__ import annotations

import redis.asyncio as aioredis

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.records import RunRecord


async def test_a_tenants_runs_are_indexed_for_it_alone_and_pruned_with_the_index(
    redis: aioredis.Redis, settings: Settings
) -> None:
    keys = Keys(settings.key_prefix, settings.partitions)
    ledger = Ledger(redis, keys, settings.model_copy(update={"retention_s": 1}))
    identities = {
        "acme.old": {"user": "alice", "tenant": "acme"},
        "acme.new": {"user": "alice", "tenant": "acme"},
        "globex.1": {"user": "bob", "tenant": "globex"},
        "run-plain": {"user": "dora"},
    }
    for run_id, identity in identities.items():
        run = RunRecord(run_id=run_id, api="openai-chat", model="m", input="hi", identity=identity)
        assert (await ledger.apply(ledger.start_run(run, []))).ok
    acme, globex = keys.runs_index(0, "acme"), keys.runs_index(0, "globex")
    assert set(await redis.zrange(acme, 0, -1)) == {b"acme.old", b"acme.new"}
    assert await redis.zrange(globex, 0, -1) == [b"globex.1"]
    assert len(await ledger.runs_since(0, 0, 0, 10)) == 4
    assert [r for r, _ in await ledger.runs_since(0, 0, 0, 10, "globex")] == ["globex.1"]

    long_ago = now_ms() - 10_000
    for index in (keys.runs_index(0), acme):
        await redis.zadd(index, {"acme.old": long_ago})
    await redis.delete(keys.run("acme.old"))  # what its expiry did
    assert await ledger.prune_expired_runs(0, now_ms()) == 1
    assert await redis.zrange(acme, 0, -1) == [b"acme.new"]
    assert await redis.zrange(globex, 0, -1) == [b"globex.1"]
