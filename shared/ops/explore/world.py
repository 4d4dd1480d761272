"""One process holding the whole system for the explorer: every worker's real handler, the
real stream plumbing (`MessageRunner`, `Acker`) and ledger on one private Redis, with the
explorer's clock, ids, model and system of record in place of the outside world.

Nothing here decides an order: `callgate.ops.explore.events` lists what may happen next and
the schedule picks.  A worker that "crashes" loses its handler (and whatever it carried in
memory); the message it was handling stays pending in its consumer group, as after a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from callgate import clock, crashpoints, envelopes
from callgate.auth.deployment import TrustSource
from callgate.auth.keyring import DEFAULT_PEOPLE, LOCAL_SUBMITTER, LocalKeyring
from callgate.auth.tokens import Signer, sign_submission
from callgate.config import Settings
from callgate.envelopes import CARRIED_ON
from callgate.jobs import StartJob
from callgate.keys import Keys
from callgate.ledger.store import Ledger
from callgate.ops.explore.choices import Choices
from callgate.ops.explore.model import ScriptedAnswers
from callgate.ops.explore.store import Store, tools
from callgate.services import executor, model_turn, reconciler, validator
from callgate.services.ingress import start_run
from callgate.streams.commands import Acker, Scripts, ensure_groups
from callgate.streams.delivery import DeadLetter, Handler, MessageRunner, WorkerStats
from callgate.streams.service import Runtime, ServiceSpec
from callgate.tools.contract import ToolContext
from callgate.tools.registry import ToolRegistry

START_MS = 1_800_000_000_000
"""The explorer's clock at the start of every episode (a fixed instant, for replays)."""
USER = "alice"
PEOPLE = {**DEFAULT_PEOPLE, USER: []}
SPECS: tuple[ServiceSpec, ...] = (model_turn.SPEC, validator.SPEC, executor.SPEC, reconciler.SPEC)
QUIET = ("callgate", "arq")


class Crashed(BaseException):
    """A worker dies at a boundary: nothing of its handler runs on (not an `Exception`, so no
    handler's own error handling sees it)."""


def settings_for(redis_url: str, trust_file: Path) -> Settings:
    return Settings(
        redis_url=redis_url,
        key_prefix="cgx",
        trust_file=trust_file,
        tool_modules=[],
        reconcile_schedule_s=(0.0, 0.0),
        model_max_retries=0,
        max_deliveries=4,
        approval_ttl_s=600.0,
    )


@dataclass
class Worker:
    """One worker kind: its consumer group, streams, runner and (re-made on a crash) handler."""

    spec: ServiceSpec
    runtime: Runtime
    accepts: dict[str, tuple[type[envelopes.EnvelopeBase], ...]]
    """Per stream it reads, the kinds that stream carries."""
    acker: Acker
    ack_task: asyncio.Task[None]
    on_dead: Callable[[DeadLetter], Awaitable[None]]
    """Its dead-letter hook, as `serve` wires it (the run is failed where the spec says)."""
    runner: MessageRunner = field(init=False)


class World:
    """Built once per session; `reset` before every episode; `close` at the end."""

    def __init__(self, redis_url: str, home: Path) -> None:
        keyring = LocalKeyring(home)
        keyring.ensure(people=PEOPLE)
        self.signers: dict[str, Signer] = {n: keyring.signer(n) for n in (*PEOPLE, LOCAL_SUBMITTER)}
        self.settings = settings_for(redis_url, keyring.trust_file)
        self.redis = aioredis.Redis.from_url(redis_url)
        self.keys = Keys(self.settings.key_prefix, self.settings.partitions)
        self.ledger = Ledger(self.redis, self.keys, self.settings)
        self.choices = Choices()
        """The schedule being run (`reset` takes the next one)."""
        self.store = Store(self._answer, self._probe)
        self.model = ScriptedAnswers(self._answer)
        self.registry = ToolRegistry(tools(self.store))
        self.trust = TrustSource(self.settings)
        self.now_ms = START_MS
        self.armed: str | None = None
        self.workers: dict[str, Worker] = {}
        self.ingress = self._runtime("ingress")

    def _answer(
        self, label: str, options: Sequence[str], weights: Sequence[float] | None = None
    ) -> str:
        return self.choices.answer(label, options, weights)

    def _runtime(self, name: str) -> Runtime:
        return Runtime(
            name,
            self.settings,
            self.redis,
            self.keys,
            self.ledger,
            f"{name}-x",
            self.registry,
            self.trust,
        )

    async def reset(self, choices: Choices, seed: int) -> None:
        """An empty Redis, the clock and the ids at their start, fresh workers."""
        self.choices = choices
        await self.close_workers()
        await self.redis.flushdb()
        self.now_ms = START_MS
        ids = random.Random(seed)
        envelopes.use_id_source(ids.randbytes)
        clock.use_clock(lambda: self.now_ms)
        crashpoints.on_boundary = self._on_boundary
        self.store.reset()
        self.model.received.clear()
        for spec in SPECS:
            self.workers[spec.name] = await self._worker(spec)

    async def _worker(self, spec: ServiceSpec) -> Worker:
        runtime = self._runtime(spec.name)
        accepts = {
            s: CARRIED_ON[kind] for kind in spec.stream_kinds for s in self.keys.streams(kind)
        }
        await ensure_groups(self.redis, spec.name, list(accepts))
        acker = Acker(self.redis, spec.name)

        async def on_dead(letter: DeadLetter) -> None:
            if spec.on_dead_letter is not None:
                await spec.on_dead_letter(runtime, letter)

        task = asyncio.create_task(acker.run(), name=f"explore-acks-{spec.name}")
        worker = Worker(spec, runtime, accepts, acker, task, on_dead)
        await self._new_runner(worker)
        return worker

    async def _new_runner(self, worker: Worker) -> None:
        spec, runtime = worker.spec, worker.runtime
        if spec is model_turn.SPEC:
            handler: Handler = model_turn.ModelTurn(runtime, {self.model.api: self.model}).handle
        else:
            handler = await spec.make_handler(runtime)
        worker.runner = MessageRunner(
            self.settings,
            Scripts(self.redis),
            group=spec.name,
            handler=handler,
            on_dead_letter=worker.on_dead,
            stats=WorkerStats(),
            accepts=worker.accepts,
        )

    async def crashed(self, name: str) -> None:
        """``name`` died: a new handler, with none of the old one's memory."""
        await self._new_runner(self.workers[name])

    def _on_boundary(self, name: str) -> None:
        if self.armed is not None and name == self.armed:
            self.armed = None
            raise Crashed(name)

    async def start(self, run_id: str, spec: dict[str, Any]) -> None:
        """The ingress's ``start_run`` job for ``spec``, signed by the local submitter."""
        token = sign_submission(self.signers[LOCAL_SUBMITTER], run_id=run_id, spec=spec)
        job = StartJob(spec=spec, token=token).model_dump()
        await start_run({"runtime": self.ingress, "job_id": run_id}, job)

    async def _probe(self, ctx: ToolContext) -> dict[str, Any]:
        run, [call] = await self.ledger.run_and_calls(ctx.run_id, [ctx.call_id])
        seen: dict[str, Any] = {
            "run": None if run is None else str(run.status),
            "call": None if call is None else str(call.state),
        }
        approval_id = None if call is None else call.approval_id
        if approval_id:
            record = await self.ledger.get_approval(ctx.run_id, approval_id)
            seen["approval"] = (
                None
                if record is None
                else {
                    "id": approval_id,
                    "state": record.state,
                    "call_id": record.call_id,
                    "args_hash": record.args_hash,
                }
            )
        seen["events"] = [(e.type, dict(e.data)) for e in await self.ledger.events(ctx.run_id)]
        return seen

    async def close_workers(self) -> None:
        for worker in self.workers.values():
            worker.acker.close()
            worker.ack_task.cancel()
            await asyncio.gather(worker.ack_task, return_exceptions=True)
            await worker.runtime.close_tools()
        self.workers.clear()

    async def close(self) -> None:
        await self.close_workers()
        await self.ingress.close_tools()
        await self.redis.aclose()
        envelopes.use_id_source(None)
        clock.use_clock(None)
        crashpoints.on_boundary = None


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """The handlers' warnings are the explorer's everyday business, not news (for as long as
    it runs: the levels are put back after)."""
    loggers = [logging.getLogger(name) for name in QUIET]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def new_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="callgate-explore-"))
