"""The durable ledger on Redis: reads, and the guarded atomic steps every worker makes.

Every state change is a `Tx` (guards + writes, see `shared.tx`) run by one Lua script in one
round trip: the compare-and-set on ``status``/``state``, the record update, the event and the
outbox message land together or not at all.  The domain helpers (`shared.steps.Steps`, which
`Ledger` extends) only *append* to a Tx, so a worker can combine several (a call transition,
its event and the next hop's message) into one atomic step; `Ledger.apply_many` pipelines
many steps in one round trip.

Redis connection and timeout errors become `RedisUnavailableError` in one place,
`redis_errors()`, so workers decide retry from the error alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, TypeVar

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.approvals import ApprovalRecord
from shared.config import Settings
from shared.errors import NotFoundError, RedisUnavailableError
from shared.keys import Keys
from shared.records import CallRecord, Event, RunRecord
from shared.redact import redact
from shared.states import RUN_TERMINAL, RunState
from shared.steps import Steps, now_ms, runs_index
from shared.tx import Guard, Tx, TxRejectedError, TxResult

__all__ = [
    "Guard",
    "Ledger",
    "Tx",
    "TxRejectedError",
    "TxResult",
    "now_ms",
    "redact",
    "redis_errors",
    "runs_index",
]

APPLY_LUA = (resources.files("shared.lua") / "apply.lua").read_text(encoding="utf-8")
APPLY_SHA = hashlib.sha1(APPLY_LUA.encode()).hexdigest()

T = TypeVar("T")


async def _io(value: Awaitable[T] | T) -> T:
    """redis-py types its commands as ``Awaitable[T] | T``; on the asyncio client they await."""
    if isinstance(value, Awaitable):
        return await value
    return value


@contextmanager
def redis_errors() -> Iterator[None]:
    """Map "the store did not answer" to `RedisUnavailableError` (retryable), once."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError) as exc:
        raise RedisUnavailableError(f"redis unavailable: {exc}") from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Ledger(Steps):
    """Reads and guarded writes of runs, calls, history and events over redis.asyncio.

    The Tx-building helpers (`run_transition`, `call_transition`, `event`, `outbox`, …) come
    from `shared.steps.Steps`; this class adds the I/O.
    """

    def __init__(self, redis: aioredis.Redis, keys: Keys, settings: Settings) -> None:
        super().__init__(keys, settings)
        self.redis = redis

    # ---- applying transactions -------------------------------------------------------
    async def apply(self, tx: Tx) -> TxResult:
        """Run one Tx atomically: all of it, or nothing and the guard that failed."""
        argv: list[Any] = [*tx.keys, tx.payload()]
        with redis_errors():
            try:
                reply = await _io(self.redis.evalsha(APPLY_SHA, len(tx.keys), *argv))
            except NoScriptError:
                await _io(self.redis.script_load(APPLY_LUA))
                reply = await _io(self.redis.evalsha(APPLY_SHA, len(tx.keys), *argv))
            except ResponseError as exc:
                raise _rejected(exc) from exc
        return tx.result(reply)

    async def apply_many(self, txs: Sequence[Tx]) -> list[TxResult]:
        """Run independent Txs in one pipelined round trip; each is atomic on its own.

        If the script cache was flushed (NOSCRIPT), the script is loaded and those Txs are
        sent again; they then run after the others of the batch, which is harmless because
        the Txs of one batch are independent by contract.
        """
        replies: list[Any] = await self._pipeline(txs)
        retry = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if retry:
            with redis_errors():
                await _io(self.redis.script_load(APPLY_LUA))
            for i, reply in zip(retry, await self._pipeline([txs[i] for i in retry]), strict=True):
                replies[i] = reply
        results = []
        for tx, reply in zip(txs, replies, strict=True):
            if isinstance(reply, ResponseError):
                raise _rejected(reply) from reply
            results.append(tx.result(reply))
        return results

    async def _pipeline(self, txs: Sequence[Tx]) -> list[Any]:
        with redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for tx in txs:
                    argv: list[Any] = [*tx.keys, tx.payload()]
                    pipe.evalsha(APPLY_SHA, len(tx.keys), *argv)
                return list(await pipe.execute(raise_on_error=False))

    # ---- reads -------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunRecord | None:
        with redis_errors():
            raw = await _io(self.redis.hgetall(self.keys.run(run_id)))
        return RunRecord.from_hash(raw) if raw else None

    async def get_call(self, run_id: str, call_id: str) -> CallRecord | None:
        with redis_errors():
            raw = await _io(self.redis.hgetall(self.keys.call(run_id, call_id)))
        return CallRecord.from_hash(raw) if raw else None

    async def get_approval(self, run_id: str, approval_id: str) -> ApprovalRecord | None:
        with redis_errors():
            raw = await _io(self.redis.hgetall(self.keys.approval(run_id, approval_id)))
        return ApprovalRecord.from_hash(raw) if raw else None

    async def get_calls(self, run_id: str, call_ids: Sequence[str]) -> list[CallRecord]:
        """The calls in the order asked, in one pipeline; `NotFoundError` if any is missing."""
        with redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for call_id in call_ids:
                    pipe.hgetall(self.keys.call(run_id, call_id))
                raws = await pipe.execute()
        missing = [c for c, raw in zip(call_ids, raws, strict=True) if not raw]
        if missing:
            raise NotFoundError(f"run {run_id}: no record of calls {missing}")
        return [CallRecord.from_hash(raw) for raw in raws]

    async def turn_call_ids(self, run_id: str, turn: int) -> list[str]:
        """The call ids of one turn in provider order."""
        with redis_errors():
            raw = await _io(self.redis.lrange(self.keys.turn_calls(run_id, turn), 0, -1))
        return [_text(v) for v in raw]

    async def history(self, run_id: str) -> list[dict[str, Any]]:
        """The provider-native conversation, exactly as it must be resent."""
        with redis_errors():
            raw = await _io(self.redis.lrange(self.keys.history(run_id), 0, -1))
        return [orjson.loads(v) for v in raw]

    async def raw_responses(self, run_id: str) -> dict[int, dict[str, Any]]:
        with redis_errors():
            raw = await _io(self.redis.hgetall(self.keys.raw_responses(run_id)))
        return {int(k): orjson.loads(v) for k, v in sorted(raw.items(), key=lambda kv: int(kv[0]))}

    async def events(self, run_id: str, count: int | None = None) -> list[Event]:
        with redis_errors():
            entries = await _io(self.redis.xrange(self.keys.events(run_id), count=count))
        return [Event.from_entry(entry_id, fields) for entry_id, fields in entries]

    async def run_ids(self, partition: int, limit: int = 100) -> list[str]:
        """The partition's most recent run ids, newest first."""
        with redis_errors():
            raw = await _io(self.redis.zrevrange(runs_index(self.keys, partition), 0, limit - 1))
        return [_text(v) for v in raw]

    async def create_run(self, run: RunRecord, outbox: Iterable[tuple[str, Any]] = ()) -> bool:
        """Create the run once, atomically with its outbox; False if it already exists."""
        return (await self.apply(self.new_run(run, outbox))).ok

    async def run_call_ids(self, run_id: str, last_turn: int) -> list[str]:
        """Every call id of turns 1..``last_turn``, in turn and provider order (one pipeline)."""
        with redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for turn in range(1, last_turn + 1):
                    pipe.lrange(self.keys.turn_calls(run_id, turn), 0, -1)
                lists = await pipe.execute()
        return [_text(call_id) for ids in lists for call_id in ids]

    async def reused_provider_call_ids(
        self, run_id: str, provider_call_ids: Sequence[str]
    ) -> list[str]:
        """Those of ``provider_call_ids`` that calls of this run already carry.

        A provider call id seen again means a replayed or confused response; results pair by
        these ids, so the caller must not create a second call under one.
        """
        run = await self.get_run(run_id)
        if run is None or not provider_call_ids:
            return []
        call_ids = await self.run_call_ids(run_id, run.turn)
        with redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for call_id in call_ids:
                    pipe.hget(self.keys.call(run_id, call_id), "provider_call_id")
                seen = {_text(v) for v in await pipe.execute() if v is not None}
        return [pid for pid in provider_call_ids if pid in seen]

    async def fail_run(self, run_id: str, reason: str) -> bool:
        """Fail a live run with ``reason`` (e.g. a dead letter); False if missing or ended.

        Reads the run first only to know which keys to expire; the transition itself is the
        usual CAS on the state it read, so a concurrent change makes this a no-op (False).
        """
        run = await self.get_run(run_id)
        if run is None or run.status in RUN_TERMINAL:
            return False
        call_ids = await self.run_call_ids(run_id, run.turn)
        tx = self.run_transition(
            Tx(), run_id, run.status, RunState.FAILED, fields={"reason": reason}
        )
        self.finish_run_ttl(tx, run_id, call_ids, run.turn)
        return (await self.apply(tx)).ok

    async def prune_runs_index(self, partition: int, older_than_ms: int) -> int:
        """Drop index entries of runs created before ``older_than_ms`` (their keys expired)."""
        with redis_errors():
            removed = await _io(
                self.redis.zremrangebyscore(runs_index(self.keys, partition), "-inf", older_than_ms)
            )
        return int(removed)


def _rejected(exc: ResponseError) -> Exception:
    """A script error: our own op check (`TxRejectedError`) or anything else, unchanged."""
    message = str(exc)
    if "CGTX" in message:
        return TxRejectedError(message[message.index("CGTX") :])
    return exc
