"""The ledger against a real Redis: atomicity, compare-and-set races, outbox, slots, TTLs."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from callgate import envelopes
from callgate.config import Settings
from callgate.envelopes import ExecRequest, TurnRequest
from callgate.errors import NotFoundError, RedisUnavailableError, TransitionError, TxRejectedError
from callgate.keys import STREAM_KINDS, Keys
from callgate.ledger.base import LOG_OUTLIVES_S
from callgate.ledger.steps import items_json
from callgate.ledger.store import Ledger, Tx
from callgate.ops.embedded_redis import free_port
from callgate.records import CallRecord, RunRecord, error_result, ok_result
from callgate.redact import REDACTED
from callgate.states import CallState, RunState

C, R = CallState, RunState


@pytest.fixture
def keys(settings: Settings) -> Keys:
    return Keys(settings.key_prefix, settings.partitions)


@pytest.fixture
def ledger(redis: aioredis.Redis, keys: Keys, settings: Settings) -> Ledger:
    return Ledger(redis, keys, settings)


def _run(run_id: str = "run-1", **kw: object) -> RunRecord:
    fields: dict[str, object] = {"api": "openai-responses", "model": "m", "input": "hi", **kw}
    return RunRecord(run_id=run_id, **fields)  # type: ignore[arg-type]


def _call(call_id: str = "t1.0", state: CallState = C.REQUESTED, **kw: object) -> CallRecord:
    """Call ``t<turn>.<index>``, of that turn."""
    turn = int(call_id.split(".")[0].removeprefix("t"))
    return CallRecord(
        run_id="run-1", call_id=call_id, turn=turn, index=0, provider_call_id=f"p-{call_id}",
        tool="book", state=state, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


async def _stream_len(redis: aioredis.Redis, key: str) -> int:
    return int(await redis.xlen(key))


async def _create(ledger: Ledger, run: RunRecord) -> bool:
    return (await ledger.apply(ledger.start_run(run, []))).ok


async def test_a_run_starts_once_with_its_history_and_first_turn(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    stream = keys.run_stream("turns", "run-1")
    history = [{"role": "user", "content": "hi"}]
    started = _run(created_ms=5, deadline_ms=99)
    assert (await ledger.apply(ledger.start_run(started, history))).ok
    assert not (await ledger.apply(ledger.start_run(_run(input="other"), history))).ok
    run = await ledger.get_run("run-1")
    assert run is not None and run.input == "hi" and run.created_ms == 5
    entries = await redis.xrange(stream)
    [first] = [envelopes.decode(fields[b"d"]) for _, fields in entries]
    assert isinstance(first, TurnRequest) and (first.turn, first.reason) == (1, "start")
    assert await ledger.history("run-1") == history
    assert await redis.zscore(keys.deadlines(keys.partition("run-1")), "run-1") == 99
    assert await ledger.run_ids(keys.partition("run-1")) == ["run-1"]
    assert [e.type for e in await ledger.events("run-1")] == ["run.created"]
    assert await ledger.get_run("missing") is None


async def test_fifty_contenders_exactly_one_takes_the_call(
    ledger: Ledger, keys: Keys, settings: Settings
) -> None:
    await ledger.apply(ledger.create_calls(Tx(), [_call(state=C.APPROVED)]))
    clients = [aioredis.Redis.from_url(settings.redis_url) for _ in range(50)]
    try:
        await asyncio.gather(*(c.ping() for c in clients))  # connect first: race on the step only
        contenders = [Ledger(c, keys, settings) for c in clients]

        async def take(i: int, lg: Ledger) -> object:
            tx = lg.call_transition(
                Tx(), "run-1", "t1.0", C.APPROVED, C.EXECUTING, {"executor": f"exec-{i}"}
            )
            return await lg.apply(tx)

        results = await asyncio.gather(*(take(i, lg) for i, lg in enumerate(contenders)))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    winners = [i for i, r in enumerate(results) if r.ok]  # type: ignore[attr-defined]
    assert len(winners) == 1
    losers = [r for r in results if not r.ok]  # type: ignore[attr-defined]
    assert len(losers) == 49
    assert {r.actual for r in losers} == {"executing"}  # type: ignore[attr-defined]
    assert all(r.failed.field == "state" for r in losers)  # type: ignore[attr-defined]
    call = await ledger.get_call("run-1", "t1.0")
    assert call is not None and call.state == C.EXECUTING
    assert call.executor == f"exec-{winners[0]}"
    transitions = [e for e in await ledger.events("run-1") if e.type == "call.transition"]
    assert len(transitions) == 1


async def test_failed_guard_writes_neither_state_nor_outbox(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    await _create(ledger, _run())
    exec_stream = keys.run_stream("exec", "run-1")
    events_before = await _stream_len(redis, keys.events("run-1"))
    tx = ledger.run_transition(Tx(), "run-1", R.VALIDATING, R.EXECUTING, fields={"turn": 9})
    ledger.outbox(tx, exec_stream, ExecRequest(run_id="run-1", turn=1, call_id="c"))
    result = await ledger.apply(tx)
    assert not result.ok and result.actual == "queued" and result.stream_ids == []
    assert await redis.hget(keys.run("run-1"), "turn") == b"0"
    assert await redis.exists(exec_stream) == 0
    assert await _stream_len(redis, keys.events("run-1")) == events_before


async def test_state_change_and_outbox_land_together(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    await _create(ledger, _run())
    exec_stream = keys.run_stream("exec", "run-1")
    tx = ledger.run_transition(Tx(), "run-1", R.QUEUED, R.AWAITING_MODEL, fields={"turn": 1})
    ledger.outbox(tx, exec_stream, ExecRequest(run_id="run-1", turn=1, call_id="c"))
    result = await ledger.apply(tx)
    assert result.ok and len(result.stream_ids) == 2  # the message, then the step's events
    entries = await redis.xrange(exec_stream)
    assert [e[0].decode() for e in entries] == result.stream_ids[:1]
    run = await ledger.get_run("run-1")
    assert run is not None and run.status == R.AWAITING_MODEL and run.turn == 1


async def test_a_late_op_that_would_fail_leaves_no_earlier_write(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    """WRONGTYPE on the last op: the script refuses before its first write."""
    await _create(ledger, _run())
    bad = keys.history("run-1")
    await redis.set(bad, "a string, not a list")
    exec_stream = keys.run_stream("exec", "run-1")
    before = await redis.hgetall(keys.run("run-1"))
    events_before = await _stream_len(redis, keys.events("run-1"))
    tx = ledger.run_transition(Tx(), "run-1", R.QUEUED, R.AWAITING_MODEL, fields={"turn": 1})
    ledger.outbox(tx, exec_stream, ExecRequest(run_id="run-1", turn=1, call_id="c"))
    tx.rpush(bad, b"{}")
    with pytest.raises(TxRejectedError, match="rpush: key holds a string"):
        await ledger.apply(tx)
    assert await redis.hgetall(keys.run("run-1")) == before
    assert await redis.exists(exec_stream) == 0
    assert await _stream_len(redis, keys.events("run-1")) == events_before
    # The same through apply_many.
    with pytest.raises(TxRejectedError):
        await ledger.apply_many([tx])
    assert await redis.hgetall(keys.run("run-1")) == before


async def test_op_checks_see_the_batch_itself(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    """Type checks use what earlier ops of the same batch will have written; a refused op
    leaves the whole batch unwritten."""
    key, other = keys.run("x"), keys.history("x")
    with pytest.raises(TxRejectedError, match="key holds a hash"):
        await ledger.apply(Tx().rpush(other, 1).hset(key, {"a": 1}).xadd(key, {"d": b"x"}))
    assert await redis.exists(key, other) == 0


async def test_illegal_transitions_raise_before_any_io(keys: Keys, settings: Settings) -> None:
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens
    ledger = Ledger(dead, keys, settings)
    tx = Tx()
    with pytest.raises(TransitionError) as caught:
        ledger.call_transition(tx, "run-1", "c", [C.EXECUTING, C.SUCCEEDED], C.UNKNOWN)
    assert "succeeded" in str(caught.value) and "unknown" in str(caught.value)
    with pytest.raises(TransitionError, match="failed -> awaiting_model"):
        ledger.run_transition(tx, "run-1", R.FAILED, R.AWAITING_MODEL)
    with pytest.raises(ValueError, match="no field"):
        ledger.call_transition(tx, "run-1", "c", C.EXECUTING, C.FAILED, {"bogus": 1})
    assert tx.guards == [] and tx.ops == 0 and tx.keys == []
    # And the one place that maps a store that does not answer.
    with pytest.raises(RedisUnavailableError):
        await ledger.get_run("run-1")
    with pytest.raises(RedisUnavailableError):
        await ledger.apply_many([Tx().hset(keys.run("r"), {"a": 1})])
    await dead.aclose()


async def test_expect_turn_and_field_guards(ledger: Ledger, keys: Keys) -> None:
    await _create(ledger, _run())
    stale = ledger.run_transition(Tx(), "run-1", R.QUEUED, R.AWAITING_MODEL, expect_turn=4)
    result = await ledger.apply(stale)
    assert not result.ok and result.failed is not None and result.failed.field == "turn"
    assert result.actual == "0"
    # A turn's steps are guarded on the history holding as many items as the turn read.
    grown = ledger.expect_history(Tx(), "run-1", 0).rpush(keys.history("run-1"), "{}")
    assert (await ledger.apply(grown)).ok
    stale_history = await ledger.apply(
        ledger.expect_history(Tx(), "run-1", 0).rpush(keys.history("run-1"), "{}")
    )
    assert not stale_history.ok and stale_history.actual == "1"
    assert len(await ledger.history("run-1")) == 1


async def test_apply_many_pipelines_independent_steps(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    txs = [ledger.start_run(_run(f"run-{i}"), []) for i in range(5)]
    txs.append(ledger.start_run(_run("run-0"), []))  # same run twice: the second create fails
    await redis.script_flush()  # NOSCRIPT → load and resend
    results = await ledger.apply_many(txs)
    assert [r.ok for r in results] == [True] * 5 + [False]
    assert results[-1].actual == "hash"
    assert all(await asyncio.gather(*(ledger.get_run(f"run-{i}") for i in range(5))))


async def test_calls_history_and_reads(ledger: Ledger, keys: Keys) -> None:
    run = _run(turn=1, status=R.AWAITING_MODEL)
    await _create(ledger, run)
    items = [{"role": "assistant", "content": "calling"}, {"type": "x"}]
    calls = [_call(f"t1.{i}").model_copy(update={"index": i}) for i in (2, 0, 1)]
    tx = ledger.start_calls(Tx(), run, calls, items_json(items), None)
    assert (await ledger.apply(tx)).ok
    assert [c.call_id for c in await ledger.turn_calls("run-1", 1)] == ["t1.2", "t1.0", "t1.1"]
    assert await ledger.history("run-1") == items
    validating = await ledger.get_run("run-1")
    assert validating is not None and validating.status == R.VALIDATING
    with pytest.raises(NotFoundError):
        await ledger.get_calls("run-1", ["t1.0", "nope"])
    assert await ledger.reused_provider_call_ids("run-1", ["p-t1.1", "fresh"]) == ["p-t1.1"]
    again = await ledger.apply(ledger.create_calls(Tx(), [_call("t1.0")]))
    assert not again.ok
    missing = await ledger.apply(
        ledger.call_transition(Tx(), "run-1", "zz", C.ALLOWED, C.EXECUTING)
    )
    assert not missing.ok and missing.actual is None


async def test_a_provider_call_id_is_used_once_per_run(ledger: Ledger, keys: Keys) -> None:
    assert (await ledger.apply(ledger.create_calls(Tx(), [_call("t1.0")]))).ok
    replayed = _call("t2.0").model_copy(update={"turn": 2, "provider_call_id": "p-t1.0"})
    result = await ledger.apply(ledger.create_calls(Tx(), [replayed]))
    assert not result.ok and result.failed is not None
    assert (result.failed.key, result.actual) == (keys.run_index("run-1"), "t1.0")
    assert await ledger.get_call("run-1", "t2.0") is None


async def test_events_are_redacted_but_the_ledger_keeps_the_values(
    ledger: Ledger, keys: Keys
) -> None:
    await ledger.apply(ledger.create_calls(Tx(), [_call(state=C.EXECUTING)]))
    secret_args = {"card": "4111 1111", "api_key": "sk-live-000", "city": "Oslo"}
    tx = ledger.call_transition(
        Tx(), "run-1", "t1.0", C.EXECUTING, C.SUCCEEDED,
        {"arguments": secret_args, "result": ok_result({"token": "abc", "n": 1})},
        sensitive={"card"},
    )  # fmt: skip
    assert (await ledger.apply(tx)).ok
    event = [e for e in await ledger.events("run-1") if e.type == "call.transition"][-1]
    assert event.data["arguments"] == {"card": REDACTED, "api_key": REDACTED, "city": "Oslo"}
    # A result is shown by its code: its payload is whatever the tool's system returned.
    assert "result" not in event.data and event.data["result_code"] == "ok"
    assert event.data["from"] == ["executing"] and event.data["to"] == "succeeded"
    call = await ledger.get_call("run-1", "t1.0")
    assert call is not None and call.arguments == secret_args
    assert call.result == ok_result({"token": "abc", "n": 1})

    failed = error_result("not_found", "no train G9")
    await ledger.apply(ledger.create_calls(Tx(), [_call("t2.0", state=C.ALLOWED)]))
    taken = ledger.call_transition(Tx(), "run-1", "t2.0", C.ALLOWED, C.EXECUTING, {"attempts": 1})
    assert (await ledger.apply(taken)).ok
    tx = ledger.call_transition(Tx(), "run-1", "t2.0", C.EXECUTING, C.FAILED, {"result": failed})
    assert (await ledger.apply(tx)).ok
    moves = [e.data for e in await ledger.events("run-1") if e.data.get("call_id") == "t2.0"]
    assert [m.get("result_code") for m in moves[1:]] == [None, "not_found"]
    assert not any("result" in m for m in moves)


async def test_none_fields_are_deleted(ledger: Ledger, keys: Keys, redis: aioredis.Redis) -> None:
    await ledger.apply(ledger.create_calls(Tx(), [_call(state=C.EXECUTING, reason="slow")]))
    tx = ledger.call_transition(Tx(), "run-1", "t1.0", C.EXECUTING, C.EXECUTING, {"reason": None})
    assert (await ledger.apply(tx)).ok
    assert await redis.hexists(keys.call("run-1", "t1.0"), "reason") == 0
    call = await ledger.get_call("run-1", "t1.0")
    assert call is not None and call.reason is None


async def test_finish_and_fail_run_set_retention_on_every_key(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis, settings: Settings
) -> None:
    executing = _run(turn=2, status=R.EXECUTING)
    tx = ledger.start_run(executing, [{"role": "user", "content": "hi"}])
    for turn in (1, 2):
        ledger.create_calls(tx, [_call(f"t{turn}.0").model_copy(update={"turn": turn})])
    tx.hset(keys.raw_responses("run-1"), {"1": '{"id": "r"}'})
    assert (await ledger.apply(tx)).ok
    ended = await ledger.end_run(executing, R.FAILED, "dead letter: poison")
    assert (await ledger.apply(ended)).ok
    again = await ledger.end_run(executing, R.FAILED, "again")  # read before it ended
    assert not (await ledger.apply(again)).ok
    run = await ledger.get_run("run-1")
    assert run is not None and run.status == R.FAILED and run.reason == "dead letter: poison"
    prefix = f"{keys.tag(keys.partition('run-1'))}:"
    run_keys = [k for k in await redis.keys(f"{prefix}*") if b"run-1" in k]
    assert len(run_keys) == 7  # run, history, raw, events, 2 calls, its index
    for key in run_keys:
        ttl = await redis.ttl(key)  # the log a second after the rest (LOG_OUTLIVES_S)
        assert 0 < ttl <= settings.retention_s + LOG_OUTLIVES_S, key


@pytest.mark.parametrize("partitions", [1, 8])
async def test_every_key_of_a_run_shares_one_slot(
    partitions: int, redis: aioredis.Redis, settings: Settings
) -> None:
    keys = Keys(settings.key_prefix, partitions)
    used: set[int] = set()
    for n in range(64):
        run_id = f"run-{n}"
        p = keys.partition(run_id)
        names = [
            keys.run(run_id), keys.history(run_id), keys.raw_responses(run_id),
            keys.call(run_id, "c1"), keys.run_index(run_id), keys.events(run_id),
            keys.approval(run_id, "a1"), keys.dead_letter(p), keys.runs_index(p),
            *(keys.run_stream(kind, run_id) for kind in STREAM_KINDS),
        ]  # fmt: skip
        slots = {key_slot(name.encode()) for name in names}
        assert len(slots) == 1, run_id
        assert _crc16_slot(keys.run(run_id)) == slots.pop()
        used.add(_crc16_slot(keys.run(run_id)))
        tx = Tx()  # the builder agrees: one Tx may touch all of them
        for name in names[:3]:
            tx.hset(name, {"x": 1})
    assert len(used) == partitions  # partitions really spread over slots
    ledger = Ledger(redis, keys, settings)
    tx = ledger.finish_run_ttl(Tx(), "run-5", ["c1", "c2"], ["a1"])
    tx.xadd(keys.run_stream("exec", "run-5"), {"d": b"x"})
    assert (await ledger.apply(tx)).ok


def _crc16_slot(key: str) -> int:
    """Redis Cluster's slot function written out (CRC16/XMODEM of the hash tag, mod 16384)."""
    data = key.encode()
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc % 16384


async def test_values_reach_redis_byte_for_byte(
    ledger: Ledger, keys: Keys, redis: aioredis.Redis
) -> None:
    tricky = 'nul\x00 tab\t "quote" \\slash\\ é 😀 \u2028 </script> \x7f ' + "x" * 70_000
    key, stream = keys.run("bytes"), keys.events("bytes")
    raw = bytes(range(256))
    tx = Tx().hset(key, {"s": tricky, "b": tricky.encode(), "raw": raw})
    result = await ledger.apply(tx.xadd(stream, {"d": tricky}))
    assert result.ok
    assert await redis.hmget(key, ["s", "b", "raw"]) == [tricky.encode(), tricky.encode(), raw]
    assert (await redis.xrange(stream))[0][1][b"d"] == tricky.encode()


async def test_a_provider_call_id_that_looks_like_a_turn_names_no_turn(ledger: Ledger) -> None:
    """The run's index keeps provider call ids apart from its turns' fields, whatever text a
    provider sends: a call id ``t:2`` in turn 1 does not block turn 2's calls."""
    looks_like = _call("t1.0").model_copy(update={"provider_call_id": "t:2"})
    assert (await ledger.apply(ledger.create_calls(Tx(), [looks_like]))).ok
    assert (await ledger.apply(ledger.create_calls(Tx(), [_call("t2.0")]))).ok
    assert [c.call_id for c in await ledger.turn_calls("run-1", 2)] == ["t2.0"]
    assert await ledger.run_call_ids("run-1", 2) == ["t1.0", "t2.0"]


async def test_a_steps_hsets_of_one_key_go_as_one_unless_an_op_on_it_comes_between(
    redis: aioredis.Redis,
) -> None:
    k, other = "{s}hsets:k", "{s}hsets:other"
    tx = Tx().hset(k, {"a": "1", "b": "1"}).hset(other, {"x": "1"}).hset(k, {"b": "2"})
    tx.hdel(k, "a").hset(k, {"a": "3", "c": "3"}).hset(k, {"c": "4"})
    ledger = Ledger(redis, Keys("t"), Settings())
    assert (await ledger.apply(tx)).ok
    assert tx.ops == 4  # k: HSET a b (b again), HDEL a, HSET a c (c again); other: HSET x
    assert await redis.hgetall(k) == {b"b": b"2", b"a": b"3", b"c": b"4"}
