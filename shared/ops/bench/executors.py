"""Scenarios 3 and 4: executor scaling with I/O-bound tools, and recovery after a SIGKILL.

Only executor processes run.  The benchmark writes allowed calls of ``bench_sleep`` (50 ms)
into the ledger, then puts their exec messages on the stream at once, so what is timed is
the executors alone: from the first message to the last result message.  Calls in flight
are sampled from the consumer group's pending count while they run.

Recovery: with two executors busy, SIGKILL one; time until every call that executor had
taken (its pending entries at the moment of the kill) has a recorded outcome.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from callgate.envelopes import ExecRequest, decode, encode, new_id
from callgate.facts import ExecCallFacts, ExecFacts, ExecRunFacts
from callgate.ledger.tx import Tx
from callgate.ops.bench.harness import NO_WORKERS, Deployment
from callgate.ops.stack import Progress
from callgate.records import CallRecord, Effect, RunRecord
from callgate.states import CALL_TERMINAL, CallState, RunState
from callgate.streams.service import consumer_name

CALLS_PER_RUN = 10
VICTIM = "executor"
"""The child the recovery scenario kills (the first executor)."""
GROUP = "executor"
TIMEOUT_S = 300.0
SAMPLE_S = 0.01
REPEAT = 2
"""Batches per executor count; their mean is reported."""

Call = tuple[str, str]
"""(run_id, call_id)."""


async def load_calls(deployment: Deployment, count: int, tool: str = "bench_sleep") -> list[Call]:
    """Write ``count`` allowed calls (and their runs) into the ledger; no message yet."""
    assert deployment.client is not None
    ledger = deployment.client.ledger
    calls: list[Call] = []
    txs: list[Tx] = []
    for start in range(0, count, CALLS_PER_RUN):
        run_id = f"run-{new_id()}"
        run = RunRecord(
            run_id=run_id,
            status=RunState.EXECUTING,
            api="openai-responses",
            model="bench",
            input="bench",
            turn=1,
            identity={"user": "bench"},
            allowed_tools=[tool],
        )
        # Seeded straight into the ledger: this scenario measures executors alone.
        tx = Tx("bench_seed").hset(ledger.keys.run(run_id), run.to_hash())
        seeded = [
            CallRecord(
                run_id=run_id,
                call_id=f"t1.{index}",
                turn=1,
                index=index,
                provider_call_id=f"call_{new_id()}",
                tool=tool,
                tool_version="1",
                arguments={"key": f"k{index}"},
                raw_arguments='{"key": "k"}',
                effect=Effect.READ,
                state=CallState.ALLOWED,
                decision="allowed",
            )
            for index in range(min(CALLS_PER_RUN, count - start))
        ]
        ledger.create_calls(tx, seeded)
        calls += [(run_id, call.call_id) for call in seeded]
        txs.append(tx)
    for chunk in range(0, len(txs), 50):
        await ledger.apply_many(txs[chunk : chunk + 50])
    return calls


async def send(deployment: Deployment, calls: list[Call]) -> float:
    """Put every call's exec message on the stream in one pipeline, each with its read order
    as the validator writes it; wall time before."""
    assert deployment.redis is not None
    started = time.time()
    pipe = deployment.redis.pipeline(transaction=False)
    for run_id, call_id in calls:
        index = call_id.rsplit(".", 1)[1]
        call = ExecCallFacts(
            tool="bench_sleep", tool_version="1", effect=Effect.READ, arguments={"key": f"k{index}"}
        )
        facts = ExecFacts(run=ExecRunFacts(identity={"user": "bench"}), call=call)
        message = ExecRequest(run_id=run_id, turn=1, call_id=call_id, facts=facts)
        pipe.xadd(deployment.keys.run_stream("exec", run_id), {"d": encode(message)})
    await pipe.execute()
    return started


async def results_done(deployment: Deployment, count: int, in_flight: list[int]) -> float:
    """Wait for ``count`` result messages; sample pending exec messages meanwhile.

    Returns the wall time (from the last result's stream id) the last one was written."""
    assert deployment.redis is not None
    redis, keys = deployment.redis, deployment.keys
    results, execs = keys.streams("results"), keys.streams("exec")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            for name in results:
                pipe.xlen(name)
            for name in execs:
                pipe.xpending(name, GROUP)
            replies = await pipe.execute()
        in_flight.append(sum(int(p["pending"]) for p in replies[len(results) :]))
        if sum(replies[: len(results)]) >= count:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"executors: {sum(replies[: len(results)])} of {count} results")
        await asyncio.sleep(SAMPLE_S)
    last = [await redis.xrevrange(name, count=1) for name in results]
    return max(int(entries[0][0].split(b"-")[0]) for entries in last if entries) / 1000


async def batch(deployment: Deployment, calls: int) -> dict[str, Any]:
    """Calls/s and calls in flight for one batch of ``calls`` sleeping calls."""
    loaded = await load_calls(deployment, calls)
    done_before = await _results(deployment)
    in_flight: list[int] = []
    started = await send(deployment, loaded)
    finished = await results_done(deployment, done_before + calls, in_flight)
    return {
        "calls": calls,
        "calls_per_s": calls / (finished - started),
        "in_flight_mean": statistics.fmean(in_flight) if in_flight else 0.0,
        "in_flight_max": max(in_flight, default=0),
    }


async def measure(
    redis_url: str, calls: int, recovery_reps: int, scaling: bool, progress: Progress
) -> dict[str, Any]:
    """One executor, then two (the second started beside the first), then recoveries."""
    out: dict[str, Any] = {}
    replicas = {**NO_WORKERS, "executor": 1}
    async with Deployment(redis_url, replicas=replicas, progress=progress) as deployment:
        await deployment.wait_serving(VICTIM)
        await batch(deployment, min(calls, 200))  # warm-up: imports, connections, caches
        if scaling:
            progress(f"executors: 1 process, {calls} calls of 50 ms, twice")
            out["one"] = _mean([await batch(deployment, calls) for _ in range(REPEAT)])
        deployment.add_worker("executor", "executor-2")
        await deployment.wait_serving("executor-2")
        await batch(deployment, min(calls, 200))  # warm the new process up too
        if scaling:
            progress(f"executors: 2 processes, {calls} calls of 50 ms, twice")
            out["two"] = _mean([await batch(deployment, calls) for _ in range(REPEAT)])
        reps = [await recover_once(deployment, calls, progress) for _ in range(recovery_reps)]
        out["recovery_s"] = reps
    return out


def _mean(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """The batches' figures averaged (calls/s and in flight), with each batch's rate kept."""
    return {
        "calls": batches[0]["calls"],
        "calls_per_s": statistics.fmean(b["calls_per_s"] for b in batches),
        "in_flight_mean": statistics.fmean(b["in_flight_mean"] for b in batches),
        "in_flight_max": max(b["in_flight_max"] for b in batches),
        "samples_calls_per_s": [b["calls_per_s"] for b in batches],
    }


async def _results(deployment: Deployment) -> int:
    assert deployment.redis is not None
    return sum([await deployment.redis.xlen(name) for name in deployment.keys.streams("results")])


async def recover_once(deployment: Deployment, calls: int, progress: Progress) -> float:
    """SIGKILL the first executor mid-batch; seconds until each call it held has an outcome."""
    supervisor = deployment.system.supervisor
    pid = supervisor.pids()[VICTIM]
    consumer = consumer_name("executor", pid)
    done_before = await _results(deployment)
    await send(deployment, await load_calls(deployment, calls))
    held = await _wait_held(deployment, consumer)
    supervisor.kill(VICTIM)
    killed = time.monotonic()
    taken = await _calls_of(deployment, consumer, held)
    await _wait_terminal(deployment, taken)
    elapsed = time.monotonic() - killed
    progress(f"recovery: {len(taken)} calls of the killed executor settled in {elapsed:.2f}s")
    await results_done(deployment, done_before + calls, [])
    await asyncio.to_thread(supervisor.wait_restarted, VICTIM, pid, 30.0)
    return elapsed


async def _wait_held(deployment: Deployment, consumer: str) -> list[str]:
    """Streams on which ``consumer`` holds pending messages, once it holds some."""
    assert deployment.redis is not None
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        held = []
        for name in deployment.keys.streams("exec"):
            rows = await deployment.redis.xpending_range(name, GROUP, "-", "+", 1, consumer)
            if rows:
                held.append(name)
        if held:
            return held
        await asyncio.sleep(0.002)
    raise TimeoutError(f"{consumer} never took a call")


async def _calls_of(deployment: Deployment, consumer: str, streams: list[str]) -> list[Call]:
    """The calls whose exec messages ``consumer`` holds (its pending entries)."""
    assert deployment.redis is not None
    redis = deployment.redis
    calls: list[Call] = []
    for name in streams:
        rows = await redis.xpending_range(name, GROUP, "-", "+", 100_000, consumer)
        for row in rows:
            entry_id = row["message_id"]
            for _, fields in await redis.xrange(name, min=entry_id, max=entry_id):
                message = decode(fields[b"d"])
                assert isinstance(message, ExecRequest)
                calls.append((message.run_id, message.call_id))
    return calls


async def _wait_terminal(deployment: Deployment, calls: list[Call]) -> None:
    assert deployment.redis is not None
    keys, redis = deployment.keys, deployment.redis
    terminal = {str(s).encode() for s in CALL_TERMINAL}
    deadline = time.monotonic() + TIMEOUT_S
    while calls:
        async with redis.pipeline(transaction=False) as pipe:
            for run_id, call_id in calls:
                pipe.hget(keys.call(run_id, call_id), "state")
            states = await pipe.execute()
        calls = [c for c, s in zip(calls, states, strict=True) if s not in terminal]
        if calls and time.monotonic() > deadline:
            raise TimeoutError(f"{len(calls)} calls of the killed executor never settled")
        await asyncio.sleep(SAMPLE_S)
