"""The ledger's I/O: applying guarded steps, and every read of runs, calls and history.

Every state change is a `Tx` (guards + writes) run by one Lua script in one round trip; the
ledger's own commands (the script and the record reads) go through the `AutoPipeline`, one
round trip per event-loop iteration.  Other commands (event logs, indexes) go through the
redis-py client.  Redis connection and timeout errors become `RedisUnavailableError` in one
place, `redis_errors()`, so workers decide retry from the error alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from callgate.config import Settings
from callgate.connect import RedisClient, slot_client
from callgate.decisions.record import ApprovalRecord
from callgate.errors import NotFoundError, RedisUnavailableError, TxRejectedError
from callgate.facts import DecideFacts, DecideRunFacts, ExecFacts, ProposedCall
from callgate.keys import Keys
from callgate.ledger.base import LedgerBase
from callgate.ledger.durable import confirming_pipe
from callgate.ledger.group import APPLY_LUA
from callgate.ledger.pipeline import AutoPipeline, Command
from callgate.ledger.run_index import RunIndex, provider_field, turn_call_ids, turn_field
from callgate.ledger.tx import Tx, TxResult
from callgate.records import CallRecord, Event, RunRecord, entry_events
from callgate.states import CallState, RunState

T = TypeVar("T")


@contextmanager
def redis_errors() -> Iterator[None]:
    """Map "the store did not answer" to `RedisUnavailableError` (retryable), once."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError) as exc:
        raise RedisUnavailableError(f"redis unavailable: {exc}") from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Reads(LedgerBase):
    """Applies steps and reads records over redis.asyncio (the named steps build on it)."""

    def __init__(self, redis: RedisClient, keys: Keys, settings: Settings) -> None:
        super().__init__(keys, settings)
        self.redis = redis
        self.pipe = AutoPipeline(redis, settings.wire, group=settings.group_steps)
        """Every ledger command goes through here: one round trip per event loop iteration."""
        self.confirming = confirming_pipe(redis, settings)
        """Where the steps a replica must hold go, each flush followed by WAIT (None unless
        ``write_durability`` is ``replica``)."""

    async def aclose(self) -> None:
        """Close the ledger's own connections; the redis client stays its owner's to close."""
        await self.pipe.aclose()
        if self.confirming is not None:
            await self.confirming.aclose()

    async def _cmds(
        self, commands: Sequence[Command], pipe: AutoPipeline | None = None
    ) -> list[Any]:
        """Several commands in one round trip; a Redis error comes back in place of a reply."""
        with redis_errors():
            return await (pipe or self.pipe).send(commands)

    async def _reads(self, commands: Sequence[Command]) -> list[Any]:
        """Several commands in one round trip; the first Redis error is raised."""
        replies = await self._cmds(commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _cmd(self, *command: Any) -> Any:
        [reply] = await self._reads([command])
        return reply

    async def _client(self, call: Awaitable[T]) -> T:
        """A command outside the ledger's own set, through the redis-py client."""
        with redis_errors():
            return await call

    # ---- applying steps --------------------------------------------------------------
    async def apply(self, tx: Tx) -> TxResult:
        """Run one Tx atomically: all of it, or nothing and the guard that failed."""
        [result] = await self.apply_many([tx])
        return result

    async def apply_many(self, txs: Sequence[Tx]) -> list[TxResult]:
        """Run independent Txs in one pipelined round trip; each is atomic on its own."""
        results, _ = await self._apply_on(self.pipe, txs)
        return results

    async def apply_confirmed(self, tx: Tx) -> tuple[TxResult, int]:
        """Run ``tx`` on the confirming connection: its result, and how many replicas hold
        it by WAIT's answer (0 when WAIT answered an error: nothing is confirmed)."""
        if self.confirming is None:
            raise ValueError("no replica confirms steps unless write_durability is replica")
        [result], [replicas] = await self._apply_on(self.confirming, [tx])
        return result, replicas if isinstance(replicas, int) else 0

    async def _apply_on(
        self, pipe: AutoPipeline, txs: Sequence[Tx]
    ) -> tuple[list[TxResult], list[Any]]:
        """The Txs' results, and the replies ``pipe`` adds after theirs (a confirming one's
        WAIT).

        If the script cache was flushed (NOSCRIPT), the script is loaded and those Txs are
        sent again; they then run after the others of the batch, which is harmless because
        the Txs of one batch are independent by contract.  The replies added are then the
        second flush's, which came after every write of the Txs.
        """
        replies = await self._cmds([("apply", tx) for tx in txs], pipe)
        replies, added = replies[: len(txs)], replies[len(txs) :]
        retry = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if retry:
            await self._client(self.redis.script_load(APPLY_LUA))
            again = await self._cmds([("apply", txs[i]) for i in retry], pipe)
            again, added = again[: len(retry)], again[len(retry) :]
            for i, reply in zip(retry, again, strict=True):
                replies[i] = reply
        results = []
        for tx, reply in zip(txs, replies, strict=True):
            if isinstance(reply, ResponseError):
                raise _rejected(reply) from reply
            results.append(tx.result(reply))
        return results, added

    # ---- records ---------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunRecord | None:
        raw = await self._cmd("hgetall", self.keys.run(run_id))
        return RunRecord.from_hash(raw) if raw else None

    async def applied_once(self, run_id: str, once_id: str) -> bool:
        """Whether a decision or reply with this id was applied to the run (`once`)."""
        return await self._cmd("hget", self.keys.decisions_seen(run_id), once_id) is not None

    async def get_call(self, run_id: str, call_id: str) -> CallRecord | None:
        raw = await self._cmd("hgetall", self.keys.call(run_id, call_id))
        return CallRecord.from_hash(raw) if raw else None

    async def get_approval(self, run_id: str, approval_id: str) -> ApprovalRecord | None:
        raw = await self._cmd("hgetall", self.keys.approval(run_id, approval_id))
        return ApprovalRecord.from_hash(raw) if raw else None

    async def run_and_calls(
        self, run_id: str, call_ids: Sequence[str]
    ) -> tuple[RunRecord | None, list[CallRecord | None]]:
        """The run and the calls asked for (None where missing), in one round trip."""
        keys = [self.keys.run(run_id), *(self.keys.call(run_id, c) for c in call_ids)]
        raw_run, *raws = await self._reads([("hgetall", key) for key in keys])
        run = RunRecord.from_hash(raw_run) if raw_run else None
        return run, [CallRecord.from_hash(raw) if raw else None for raw in raws]

    async def run_and_history(self, run_id: str) -> tuple[RunRecord | None, list[bytes]]:
        """The run and its provider-native history (one JSON item each), in one round trip."""
        raw_run, items = await self._reads(
            [("hgetall", self.keys.run(run_id)), ("lrange", self.keys.history(run_id), 0, -1)]
        )
        return (RunRecord.from_hash(raw_run) if raw_run else None), list(items)

    async def run_and_turn_calls(
        self, run_id: str, turn: int
    ) -> tuple[RunRecord | None, list[str]]:
        """The run and the call ids of its turn ``turn``, in one round trip."""
        raw_run, ids = await self._reads(
            [
                ("hgetall", self.keys.run(run_id)),
                ("hget", self.keys.run_index(run_id), turn_field(turn)),
            ]
        )
        return (RunRecord.from_hash(raw_run) if raw_run else None), turn_call_ids(ids)

    async def get_calls(self, run_id: str, call_ids: Sequence[str]) -> list[CallRecord]:
        """The calls in the order asked, in one round trip; `NotFoundError` if any is missing."""
        raws = await self._reads([("hgetall", self.keys.call(run_id, c)) for c in call_ids])
        return require_calls(
            run_id, call_ids, [CallRecord.from_hash(raw) if raw else None for raw in raws]
        )

    async def turn_calls(self, run_id: str, turn: int) -> list[CallRecord]:
        """Every call of one turn, in provider order (two round trips)."""
        raw = await self._cmd("hget", self.keys.run_index(run_id), turn_field(turn))
        ids = turn_call_ids(raw)
        return await self.get_calls(run_id, ids) if ids else []

    async def history(self, run_id: str) -> list[dict[str, Any]]:
        """The provider-native conversation, exactly as it must be resent."""
        raw = await self._cmd("lrange", self.keys.history(run_id), 0, -1)
        return [orjson.loads(v) for v in raw]

    async def raw_responses(self, run_id: str) -> dict[int, dict[str, Any]]:
        raw = await self._cmd("hgetall", self.keys.raw_responses(run_id))
        return {int(k): orjson.loads(v) for k, v in sorted(raw.items(), key=lambda kv: int(kv[0]))}

    async def events(self, run_id: str, count: int | None = None) -> list[Event]:
        """The run's events, oldest first (of its first ``count`` entries: a step's events
        share one)."""
        entries = await self._client(self.redis.xrange(self.keys.events(run_id), count=count))
        return [event for entry_id, fields in entries for event in entry_events(entry_id, fields)]

    async def run_ids(self, partition: int, limit: int = 100) -> list[str]:
        """The partition's most recent run ids, newest first."""
        index = self.keys.runs_index(partition)
        raw = await self._client(self.redis.zrevrange(index, 0, limit - 1))
        return [_text(v) for v in raw]

    async def runs_since(
        self, partition: int, since_ms: int, offset: int, count: int, tenant: str | None = None
    ) -> list[tuple[str, int]]:
        """A page of the partition's runs index (``tenant``'s own, if given), newest first:
        ``(run id, created_ms)`` of runs created at or after ``since_ms``, skipping the
        ``offset`` newest."""
        index = self.keys.runs_index(partition, tenant)
        raw = await self._client(
            self.redis.zrevrangebyscore(
                index, "+inf", since_ms, start=offset, num=count, withscores=True
            )
        )
        return [(_text(member), int(score)) for member, score in raw]

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord | None]:
        """The runs asked for (None where a record is gone), in one round trip."""
        if not run_ids:
            return []
        raws = await self._reads([("hgetall", self.keys.run(r)) for r in run_ids])
        return [RunRecord.from_hash(raw) if raw else None for raw in raws]

    async def dead_letters(self, partition: int, count: int) -> list[tuple[str, dict[str, bytes]]]:
        """The partition's newest dead letters, newest first: ``(entry id, fields)`` with the
        fields the stream loop writes (stream, group, message_id, reason, delivery_count, d)."""
        entries = await self._client(
            self.redis.xrevrange(self.keys.dead_letter(partition), count=count)
        )
        return [
            (_text(entry_id), {_text(k): v for k, v in fields.items()})
            for entry_id, fields in entries
        ]

    async def run_index(self, run_id: str) -> RunIndex:
        """What the run made: its turns' calls, its approvals (one round trip)."""
        return RunIndex.from_hash(await self._cmd("hgetall", self.keys.run_index(run_id)))

    async def run_call_ids(self, run_id: str, last_turn: int) -> list[str]:
        """Every call id of turns 1..``last_turn``, in turn and provider order (one round trip)."""
        return (await self.run_index(run_id)).call_ids(last_turn)

    async def run_calls(self, run_id: str, last_turn: int) -> list[CallRecord]:
        """Every call of turns 1..``last_turn``, in turn and provider order (two round trips)."""
        call_ids = await self.run_call_ids(run_id, last_turn)
        return await self.get_calls(run_id, call_ids) if call_ids else []

    async def reused_provider_call_ids(
        self, run_id: str, provider_call_ids: Sequence[str]
    ) -> list[str]:
        """Those of ``provider_call_ids`` that calls of this run already carry (one HMGET on
        the run's index `create_calls` fills): results pair by them, so none may be used twice."""
        if not provider_call_ids:
            return []
        fields = [provider_field(pid) for pid in provider_call_ids]
        seen = await self._cmd("hmget", self.keys.run_index(run_id), *fields)
        return [pid for pid, hit in zip(provider_call_ids, seen, strict=True) if hit is not None]

    # ---- the facts each hop decides on, from the ledger (`callgate.facts`) ------------
    async def decide_facts(
        self, run_id: str, turn: int, call_ids: Sequence[str]
    ) -> DecideFacts | None:
        """A turn's calls and the run's authority; None once decided or moved on."""
        run, found = await self.run_and_calls(run_id, call_ids)
        if run is None:
            raise NotFoundError(f"run {run_id} does not exist")
        if run.status != RunState.VALIDATING or run.turn != turn:
            return None
        calls = require_calls(run_id, call_ids, found)
        if any(call.state != CallState.REQUESTED for call in calls):
            return None
        return DecideFacts(
            run=DecideRunFacts.of(run), calls=tuple(ProposedCall.of(c) for c in calls)
        )

    async def exec_facts(self, run_id: str, call_id: str) -> ExecFacts | None:
        """A decided call and who it runs for; None if it was never decided to run."""
        run, [call] = await self.run_and_calls(run_id, [call_id])
        if call is None or run is None:
            raise NotFoundError(f"call {run_id}/{call_id} does not exist")
        return ExecFacts.of(run, call)

    # ---- retention -------------------------------------------------------------------
    async def retention(self, tx: Tx, run_id: str) -> Tx:
        """Append `finish_run_ttl` for every key the run made: its calls and approvals are
        read from its index, one round trip."""
        index = await self.run_index(run_id)
        return self.finish_run_ttl(tx, run_id, index.call_ids(), index.approval_ids)

    async def prune_expired_runs(self, partition: int, now: int, limit: int = 1000) -> int:
        """Drop the index entries of runs whose keys expired: the runs index and the inbox of
        unresolved calls, the two things a finished run leaves that have no TTL (a cancelled
        run may end with a call still unresolved).  Returns how many runs left the runs index.

        Only entries older than the retention can belong to expired keys; of those, up to
        ``limit`` of the oldest are checked, live ones (long paused runs) skipped.
        """
        cutoff = now - self.settings.retention_s * 1000
        keys = self.keys
        await self._prune(
            keys.unresolved_calls(partition),
            cutoff,
            limit,
            lambda member: keys.call(*member.split(" ", 1)),
            lambda member: self.tenant_copy(keys.unresolved_calls, member.split(" ", 1)[0]),
        )
        return await self._prune(
            keys.runs_index(partition),
            cutoff,
            limit,
            keys.run,
            lambda run_id: self.tenant_copy(keys.runs_index, run_id),
        )

    async def _prune(
        self,
        index: str,
        cutoff: int,
        limit: int,
        record_of: Callable[[str], str],
        tenant_copy: Callable[[str], str | None],
    ) -> int:
        """Remove the members of ``index`` scored before ``cutoff`` whose record is gone, and
        each from its tenant's copy of the index (``tenant_copy``) in the same step."""
        oldest = await self._client(self.redis.zrangebyscore(index, "-inf", cutoff, 0, limit))
        members = [_text(m) for m in oldest]
        alive = await self._reads([("exists", record_of(m)) for m in members])
        gone = [m for m, n in zip(members, alive, strict=True) if not n]
        if gone:
            tx = (await slot_client(self.redis, index)).pipeline(transaction=True)
            tx.zrem(index, *gone)
            for member in gone:
                if (copy := tenant_copy(member)) is not None:
                    tx.zrem(copy, member)
            await self._client(tx.execute())
        return len(gone)


def require_calls(
    run_id: str, call_ids: Sequence[str], found: Sequence[CallRecord | None]
) -> list[CallRecord]:
    """``found`` without gaps; `NotFoundError` naming the call ids that have no record."""
    missing = [c for c, call in zip(call_ids, found, strict=True) if call is None]
    if missing:
        raise NotFoundError(f"run {run_id}: no record of calls {missing}")
    return [call for call in found if call is not None]


def _rejected(exc: ResponseError) -> Exception:
    """A script error: our own op check (`TxRejectedError`) or anything else, unchanged."""
    message = str(exc)
    if "CGTX" in message:
        return TxRejectedError(message[message.index("CGTX") :])
    return exc
