"""What every benchmark scenario needs: a Redis, a deployment of real processes, runs, waits.

`bench_redis` uses the Redis at ``REDIS_URL`` when it answers (the user's own), else starts a
private one for the whole benchmark.  `Deployment` is a `LocalSystem` (real worker processes
under a supervisor) with a fresh key prefix on that Redis, plus a client; the provider
environment is set here so a benchmark never reaches a real provider, whatever keys the
user's shell holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

from redis.exceptions import ResponseError

from callgate.client import CallgateClient, settled
from callgate.connect import RedisClient, cluster_address, sentinel_address
from callgate.keys import Keys
from callgate.logs import mask_url_password
from callgate.ops.bench.provider import MODEL_CPU_DIR_ENV, stand_in_seconds
from callgate.ops.bench.tools import MODULE as TOOLS_MODULE
from callgate.ops.embedded_redis import EmbeddedRedis, redis_answers
from callgate.ops.stack import Progress, default_redis_url, worker_argv
from callgate.ops.system import LocalSystem, SystemSpec
from callgate.records import RunRecord
from callgate.states import RunState
from callgate.tools.registry import load_registry

IN_PROCESS = "callgate.ops.bench.provider:in_process"
IN_PROCESS_TIMED = "callgate.ops.bench.provider:in_process_timed"
PROVIDER_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")
SUBMIT_CONCURRENCY = 32
POLL_S = 0.1
POLL_BATCH = 50
SERVING = '"msg":"serving"'
"""The log line a stream worker prints once it is about to read (callgate.streams.service)."""
STREAMS_OF = {"executor": ("exec",), "validator": ("validate",), "model_turn": ("turns",)}
NO_WORKERS = {"ingress": 0, "model_turn": 0, "validator": 0, "executor": 0, "reconciler": 0}


@contextlib.contextmanager
def bench_redis(url: str | None, progress: Progress, *, private: bool = False) -> Iterator[str]:
    """``url``, else REDIS_URL if it answers and is one server (not a cluster or Sentinel's),
    else (or when ``private``) a private redis-server for the duration."""
    candidate = url or os.environ.get("REDIS_URL") or default_redis_url()
    one_server = cluster_address(candidate) is None and sentinel_address(candidate) is None
    if not private and one_server and redis_answers(candidate):
        progress(f"Redis at {mask_url_password(candidate)}")
        yield candidate
        return
    if url is not None:
        raise RuntimeError(f"no Redis answers at {mask_url_password(url)}")
    with EmbeddedRedis() as own:
        state = "does not answer" if one_server else "is not one server"
        why = "asked for" if private else f"{mask_url_password(candidate)} {state}"
        progress(f"private Redis ({why}) at {own.url}")
        yield own.url


def run_spec(api: str, scenario: str, max_turns: int = 60) -> dict[str, Any]:
    return {
        "api": api,
        "model": scenario,
        "input": "Benchmark run: read the values you are asked for.",
        "identity": {"user": "bench"},
        "allowed_tools": list(load_registry([TOOLS_MODULE]).names()),
        "max_turns": max_turns,
    }


class Deployment:
    """A `LocalSystem` on the benchmark's Redis: ``model`` is ``sdk`` (the official SDKs and
    the scripted model server), ``in_process`` or ``in_process_timed``
    (`callgate.ops.bench.provider`)."""

    def __init__(
        self,
        redis_url: str,
        *,
        model: str = "in_process",
        replicas: Mapping[str, int] | None = None,
        env: Mapping[str, str] | None = None,
        progress: Progress,
    ) -> None:
        worker_env: dict[str, dict[str, str]] = {}
        self.stand_in_dir: str | None = None
        """Where the model stand-in's CPU is kept (`provider.StandInCpu`); None with the SDK."""
        if model != "sdk":
            factory = IN_PROCESS_TIMED if model == "in_process_timed" else IN_PROCESS
            self.stand_in_dir = tempfile.mkdtemp(prefix="callgate-bench-model-")
            worker_env["model_turn"] = {
                "CALLGATE_ADAPTER_FACTORY": factory,
                MODEL_CPU_DIR_ENV: self.stand_in_dir,
            }
        spec = SystemSpec(
            services=(),
            scripted_model=model == "sdk",
            replicas=dict(replicas or {}),
            redis_url=redis_url,
            tool_modules=(TOOLS_MODULE,),
            worker_env=worker_env,
        )
        self.system = LocalSystem(spec, progress=progress)
        for name in PROVIDER_ENV:
            self.system.env.pop(name, None)
        if model != "sdk":
            # The SDK clients the adapters build (never used to send) want a key.
            self.system.env.update(OPENAI_API_KEY="bench-local", ANTHROPIC_API_KEY="bench-local")
        self.system.env.update(env or {})
        self.client: CallgateClient | None = None
        self.redis: RedisClient | None = None

    async def __aenter__(self) -> Deployment:
        await asyncio.to_thread(self.system.start)
        self.client = CallgateClient(self.system.settings)
        self.redis = self.client.redis
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.system.stop)
        if self.stand_in_dir is not None:
            shutil.rmtree(self.stand_in_dir, ignore_errors=True)
        if self.client is not None:
            await delete_prefix(self.client.redis, self.keys.prefix)
            await self.client.close()

    @property
    def keys(self) -> Keys:
        assert self.client is not None
        return self.client.keys

    def add_worker(self, kind: str, name: str) -> int:
        """Start one more ``kind`` worker process, as child ``name``; its pid."""
        return self.system.supervisor.start(name, worker_argv(kind), self.system.env)

    async def wait_serving(self, child: str, timeout_s: float = 60.0) -> None:
        """Block until worker ``child`` says it is serving and its groups exist."""
        supervisor = self.system.supervisor
        await asyncio.to_thread(supervisor.wait_for_line, child, SERVING, timeout_s)
        assert self.redis is not None
        kind = child.split("-")[0]
        deadline = time.monotonic() + timeout_s
        for name in [s for k in STREAMS_OF.get(kind, ()) for s in self.keys.streams(k)]:
            while not await self._has_group(name, kind):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {kind} consumer group on {name}")
                await asyncio.sleep(POLL_S)

    async def _has_group(self, stream: str, group: str) -> bool:
        assert self.redis is not None
        try:
            groups = await self.redis.xinfo_groups(stream)
        except ResponseError:  # no such stream yet
            return False
        return any(g["name"].decode() == group for g in groups)

    async def submit(self, spec: dict[str, Any], count: int) -> list[str]:
        """Submit ``count`` runs of ``spec`` (a few at a time, as many services would)."""
        assert self.client is not None
        client = self.client
        gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)

        async def one() -> str:
            async with gate:
                return await client.submit(spec)

        return list(await asyncio.gather(*(one() for _ in range(count))))

    async def wait_settled(self, run_ids: list[str], timeout_s: float) -> list[RunRecord]:
        """Poll the run records until every run ended or paused; `TimeoutError` otherwise.

        Runs are polled oldest first, ``POLL_BATCH`` at a time, so polling a large batch
        costs little of the CPU the pipeline under measurement shares; a run's record is read
        as soon as it settles, because the memory deployment's short retention may expire the
        first runs of a large batch before the last one ends."""
        assert self.client is not None
        ledger, redis = self.client.ledger, self.client.redis
        records: dict[str, RunRecord] = {}
        waiting = list(run_ids)
        deadline = time.monotonic() + timeout_s
        while waiting:
            polled = waiting[:POLL_BATCH]
            async with redis.pipeline(transaction=False) as pipe:
                for run_id in polled:
                    pipe.hget(ledger.keys.run(run_id), "status")
                statuses = await pipe.execute()
            for run_id, status in zip(polled, statuses, strict=True):
                if _settled(status):
                    run = await ledger.get_run(run_id)
                    if run is None:
                        raise RuntimeError(f"run {run_id} expired before it was read")
                    records[run_id] = run
            waiting = [r for r in polled if r not in records] + waiting[len(polled) :]
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(waiting)} of {len(run_ids)} runs still running")
            if waiting[:1] == polled[:1]:  # the oldest is still running: give it time
                await asyncio.sleep(POLL_S)
        return [records[run_id] for run_id in run_ids]

    async def run_batch(
        self, spec: dict[str, Any], count: int, timeout_s: float
    ) -> tuple[list[RunRecord], float]:
        """Submit ``count`` runs and wait for them; (records, wall time when submitting began)."""
        started = time.time()
        run_ids = await self.submit(spec, count)
        runs = await self.wait_settled(run_ids, timeout_s)
        failed = [r for r in runs if r.status != RunState.COMPLETED]
        if failed:
            first = failed[0]
            raise RuntimeError(
                f"{len(failed)} of {count} runs did not complete: "
                f"{first.run_id}: {first.status} {first.reason}"
            )
        return runs, started

    def worker_rss(self) -> dict[str, int]:
        """Resident set size (bytes) of every worker process, by child name."""
        return {
            name: rss
            for name, pid in self.system.supervisor.pids().items()
            if (rss := process_rss(pid)) is not None
        }


NOT_WORKERS = ("redis", "bench")
"""The entries of `cpu_seconds` that are not the runtime's Python workers."""


async def cpu_seconds(deployment: Deployment) -> dict[str, float]:
    """CPU time so far of every worker, of Redis (its INFO) and of this benchmark process."""
    assert deployment.redis is not None
    info = await deployment.redis.info("cpu")
    pids = deployment.system.supervisor.pids()
    seconds = {name: process_cpu_s(pid) for name, pid in pids.items()}
    seconds["redis"] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    seconds["bench"] = time.process_time()
    return seconds


def stand_in_cpu_s(deployment: Deployment) -> float:
    """CPU seconds the model_turn workers spent so far inside the benchmark's model stand-in:
    a part of their CPU that a deployment with a real provider does not spend."""
    if deployment.stand_in_dir is None:
        return 0.0
    return stand_in_seconds(deployment.stand_in_dir)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (Linux /proc), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settled(status: bytes | None) -> bool:
    return status is not None and settled(status.decode())


def process_rss(pid: int) -> int | None:
    """VmRSS of ``pid`` in bytes (Linux /proc), None if it is gone or unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


async def delete_prefix(redis: RedisClient, prefix: str) -> None:
    """Remove everything a benchmark deployment left under its own prefix."""
    async for name in redis.scan_iter(f"{prefix}:*", count=1000):
        await redis.unlink(name)
