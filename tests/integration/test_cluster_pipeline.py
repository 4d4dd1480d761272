"""The ledger's pipeline on a Redis Cluster: each flush goes one pipeline per slot, to that
slot's master, and every request is answered — a request of no commands (a read of no
records) and a step of events only included, which once left the whole flush's callers waiting for
ever."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from callgate.connect import redis_client
from callgate.keys import Keys
from callgate.ledger.group import APPLY_LUA
from callgate.ledger.pipeline import AutoPipeline
from callgate.ledger.tx import Tx
from callgate.ops.embedded_cluster import EmbeddedCluster

pytestmark = pytest.mark.timeout(30)


async def test_every_request_of_a_flush_over_three_slots_is_answered(
    redis_cluster: EmbeddedCluster,
) -> None:
    redis = redis_client(redis_cluster.cluster_url)
    keys = Keys(f"t{uuid.uuid4().hex[:8]}", 3)
    runs = [f"run-{p}" for p in range(12)]
    for run_id in runs:
        await redis.hset(keys.run(run_id), "status", run_id)
    pipe = AutoPipeline(redis)
    try:
        requests = [pipe.send([("hget", keys.run(run_id), "status")]) for run_id in runs]
        nothing = pipe.send([])
        replies = await asyncio.wait_for(asyncio.gather(*requests, nothing), 5)
    finally:
        await pipe.aclose()
        await redis.aclose()
    assert replies == [[run_id.encode()] for run_id in runs] + [[]]
    assert len({keys.partition(run_id) for run_id in runs}) == 3


async def test_a_step_of_events_only_is_written_in_its_runs_slot(
    redis_cluster: EmbeddedCluster,
) -> None:
    """A step whose only write is an event (a model retry noted) has no key until it is
    encoded: it once failed the routing of its whole flush."""
    redis = redis_client(redis_cluster.cluster_url)
    keys = Keys(f"t{uuid.uuid4().hex[:8]}", 3)
    await redis.script_load(APPLY_LUA)
    pipe = AutoPipeline(redis)
    try:
        events = [keys.events(f"run-{p}") for p in range(6)]
        steps = [Tx("note_retry").event(stream, "model.retry", b"{}", 1) for stream in events]
        sent = [pipe.send([("apply", step)]) for step in steps]
        replies = await asyncio.wait_for(asyncio.gather(*sent), 5)
        written = [await redis.xlen(stream) for stream in events]
    finally:
        await pipe.aclose()
        await redis.aclose()
    assert [type(reply) for [reply] in replies] == [list] * len(events)
    assert written == [1] * len(events)
    assert len({keys.partition(f"run-{p}") for p in range(6)}) == 3


async def test_a_request_no_slot_is_found_for_fails_alone(redis_cluster: EmbeddedCluster) -> None:
    redis = redis_client(redis_cluster.cluster_url)
    keys = Keys(f"t{uuid.uuid4().hex[:8]}", 3)
    await redis.hset(keys.run("run-1"), "status", "running")
    pipe = AutoPipeline(redis)
    try:
        malformed = pipe.send([("hget",)])
        read = pipe.send([("hget", keys.run("run-1"), "status")])
        done, _ = await asyncio.wait([malformed, read], timeout=5)
    finally:
        await pipe.aclose()
        await redis.aclose()
    assert done == {malformed, read}
    assert isinstance(malformed.exception(), IndexError)
    assert read.result() == [b"running"]
