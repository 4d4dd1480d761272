"""What a scrape reads from real Redis: bounded, per partition, whatever exists or not yet."""

from __future__ import annotations

import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.keys import Keys
from callgate.metrics.gather import snapshot


async def test_a_scrape_reads_a_bounded_share_of_each_partition_and_every_group(
    redis: aioredis.Redis, settings: Settings
) -> None:
    keys = Keys(settings.key_prefix, 2)
    for i in range(30):
        run_id = f"run-{i}"
        await redis.zadd(keys.runs_index(keys.partition(run_id)), {run_id: i})
        await redis.hset(keys.run(run_id), mapping={"status": "completed" if i % 2 else "queued"})
    await redis.xadd(keys.dead_letter(1), {"reason": "x"})
    await redis.xgroup_create(keys.stream("exec", 1), "executor", id="0", mkstream=True)
    await redis.xadd(keys.stream("exec", 1), {"d": "{}"})

    snap = await snapshot(redis, keys, runs_max=10)
    assert snap.runs_sampled == 10, "five from each partition, not ten"
    assert sum(snap.runs.values()) == 10
    assert snap.dead_letters == {0: 0, 1: 1}
    [group] = snap.groups
    assert (group.stream, group.partition, group.group, group.pending, group.lag) == (
        "exec",
        1,
        "executor",
        0,
        1,
    )

    everything = await snapshot(redis, keys)
    assert everything.runs == {"completed": 15, "queued": 15}
