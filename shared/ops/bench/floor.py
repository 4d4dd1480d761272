"""The floor: a raw relay of the same Redis stream hops a tool round trip makes, and nothing else.

Three processes stand in for the workers (``model``, ``validator``, ``executor``) and pass
tokens around the four streams a tool call crosses: validate → exec → results → turns.  Per
hop: XREADGROUP, then one Lua step (a state write and the XADD of the next hop), then XACK —
sent in one pipeline per batch read.  Payloads are real envelopes of each stream, so the
bytes moved are the pipeline's.  A token is one run: ``n`` turns, ``f`` calls per turn (the
validator hop fans out, the results hop joins).  The ``model`` role notes when a token's turn
message arrives and when it sends the next request, as the model would see it; a finished
token's round trips go to the ``done`` stream.

Latency floor: one token at a time, so every read returns one message.  Throughput floor:
many tokens, reads of up to ``--count`` messages, one pipeline per batch.

    python -m callgate.ops.bench.floor --role model|validator|executor [--count 64]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis

from callgate import eventloop
from callgate.config import Settings
from callgate.connect import RedisClient, script
from callgate.envelopes import CallResult, ExecRequest, TurnRequest, ValidateRequest, encode, new_id
from callgate.facts import (
    DecideFacts,
    DecideRunFacts,
    ExecCallFacts,
    ExecFacts,
    ExecRunFacts,
    ProposedCall,
)
from callgate.keys import Keys
from callgate.ops.supervisor import Supervisor
from callgate.records import Effect, ok_result

START_TIMEOUT_S = 30.0

GROUP = "floor"
HOPS = ("turns", "validate", "exec", "results")
ROLES: dict[str, tuple[str, ...]] = {
    "model": ("turns", "results"),
    "validator": ("validate",),
    "executor": ("exec",),
}
"""Which streams each stand-in reads: the same split as the workers'."""

_RELAY_LUA = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local join = tonumber(ARGV[3])
if join > 0 and redis.call('HINCRBY', KEYS[1], 'j' .. ARGV[2], 1) < join then return 0 end
for i = 1, tonumber(ARGV[4]) do redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5)) end
return 1
"""


def stream(keys: Keys, hop: str) -> str:
    return keys.bench(f"floor:{hop}")


def payloads() -> dict[str, bytes]:
    """A real envelope per stream, with ids as long as the pipeline's."""
    run_id = f"run-{new_id()}"
    return {
        "turns": encode(TurnRequest(run_id=run_id, turn=12, reason="next")),
        "validate": encode(_validate_request(run_id)),
        "exec": encode(_exec_request(run_id)),
        "results": encode(
            CallResult(
                run_id=run_id,
                turn=12,
                call_id="t12.0",
                state="succeeded",
                result=ok_result({"key": "k12", "value": "value of k12"}),
            )
        ),
    }


def _validate_request(run_id: str) -> ValidateRequest:
    """The validator's message as model_turn sends it: the turn's one proposed call, with the
    run's facts the validator decides on carried along (`callgate.facts`)."""
    facts = DecideFacts(
        run=DecideRunFacts(
            identity={"user": "bench"},
            allowed_tools=["bench_read"],
            batch_policy="hold_effects",
            approval_ttl_s=None,
        ),
        calls=(
            ProposedCall(
                call_id="t12.0", index=0, tool="bench_read", raw_arguments='{"key":"k12"}'
            ),
        ),
    )
    return ValidateRequest(run_id=run_id, turn=12, call_ids=("t12.0",), facts=facts)


def _exec_request(run_id: str) -> ExecRequest:
    """The executor's message as the validator sends it: the allowed call, with the facts the
    executor runs it on carried along (`callgate.facts`)."""
    call = ExecCallFacts(
        tool="bench_read", tool_version="1", effect=Effect.READ, arguments={"key": "k12"}
    )
    facts = ExecFacts(run=ExecRunFacts(identity={"user": "bench"}), call=call)
    return ExecRequest(run_id=run_id, turn=12, call_id="t12.0", facts=facts)


def token_fields(payload: bytes, token: str, turn: int, turns: int, fanout: int) -> dict[Any, Any]:
    return {"d": payload, "r": token, "t": turn, "n": turns, "f": fanout}


class Relay:
    """One stand-in process: reads its streams, relays every message to the next hop."""

    def __init__(self, redis: RedisClient, keys: Keys, role: str, count: int) -> None:
        self.redis = redis
        self.keys = keys
        self.hops = ROLES[role]
        self.count = count
        self.consumer = f"{role}-{new_id()}"
        self.script = script(redis, _RELAY_LUA)
        self.payloads = payloads()
        self.answered_ns: dict[str, int] = {}
        self.round_trips: dict[str, list[int]] = {}

    async def run(self) -> None:
        streams: dict[Any, Any] = {stream(self.keys, hop): ">" for hop in self.hops}
        while True:
            reply = await self.redis.xreadgroup(
                GROUP, self.consumer, streams, count=self.count, block=1000
            )
            arrived_ns = time.monotonic_ns()
            pipe = self.redis.pipeline(transaction=False)
            for name, entries in reply or []:
                hop = name.decode().rsplit(":", 1)[1]
                for _, fields in entries:
                    await self._relay(pipe, hop, fields, arrived_ns)
                ids = [entry_id for entry_id, _ in entries]
                pipe.xack(name, GROUP, *ids)
            if len(pipe):
                self._answered(time.monotonic_ns())
                await pipe.execute()

    async def _relay(self, pipe: Any, hop: str, fields: dict[bytes, bytes], now_ns: int) -> None:
        token, turn = fields[b"r"].decode(), int(fields[b"t"])
        turns, fanout = int(fields[b"n"]), int(fields[b"f"])
        join, copies, nxt, data = 0, 1, hop, b""
        if hop == "turns":
            self._arrived(token, now_ns)
            nxt = "validate" if turn <= turns else "done"
            data = self.payloads["validate"] if turn <= turns else self._finished(token)
        elif hop == "validate":
            nxt, copies, data = "exec", fanout, self.payloads["exec"]
        elif hop == "exec":
            nxt, data = "results", self.payloads["results"]
        else:
            nxt, join, turn, data = "turns", fanout, turn + 1, self.payloads["turns"]
        state = self.keys.bench(f"floor:tok:{token}")
        args: list[Any] = [
            "turn",
            turn,
            join,
            copies,
            "d",
            data,
            "r",
            token,
            "t",
            turn,
            "n",
            turns,
            "f",
            fanout,
        ]
        await self.script(keys=[state, stream(self.keys, nxt)], args=args, client=pipe)

    def _arrived(self, token: str, now_ns: int) -> None:
        answered = self.answered_ns.pop(token, None)
        if answered is not None:
            self.round_trips.setdefault(token, []).append(now_ns - answered)
        self.answered_ns[token] = -1  # this batch's send time, set in `_answered`

    def _answered(self, now_ns: int) -> None:
        for token, value in self.answered_ns.items():
            if value == -1:
                self.answered_ns[token] = now_ns

    def _finished(self, token: str) -> bytes:
        self.answered_ns.pop(token, None)
        return orjson.dumps(self.round_trips.pop(token, []))


async def create_groups(redis: RedisClient, keys: Keys) -> None:
    """The relay's consumer groups, from "0", before any token is sent."""
    for hop in HOPS:
        await redis.xgroup_create(stream(keys, hop), GROUP, id="0", mkstream=True)


async def _main(role: str, count: int) -> None:
    settings = Settings()
    redis = aioredis.Redis.from_url(settings.redis_url)
    relay = Relay(redis, Keys(settings.key_prefix, settings.partitions), role, count)
    print(f"floor {role} ready", flush=True)
    try:
        await relay.run()
    finally:
        await redis.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m callgate.ops.bench.floor")
    parser.add_argument("--role", choices=sorted(ROLES), required=True)
    parser.add_argument("--count", type=int, default=64, help="XREADGROUP COUNT")
    args = parser.parse_args(argv)
    eventloop.run(_main(args.role, args.count))


if __name__ == "__main__":
    main()


class FloorRelay:
    """The three stand-ins as real processes, and the two floor measurements."""

    def __init__(
        self, supervisor: Supervisor, env: dict[str, str], redis: RedisClient, keys: Keys
    ) -> None:
        self.supervisor = supervisor
        self.env = env
        self.redis = redis
        self.keys = keys

    async def start(self, count: int = 64) -> FloorRelay:
        await create_groups(self.redis, self.keys)
        for role in ROLES:
            argv = [
                sys.executable,
                "-m",
                "callgate.ops.bench.floor",
                "--role",
                role,
                "--count",
                str(count),
            ]
            self.supervisor.start(f"floor-{role}", argv, self.env, restart=False)
        for role in ROLES:
            await asyncio.to_thread(
                self.supervisor.wait_for_line, f"floor-{role}", "ready", START_TIMEOUT_S
            )
        return self

    async def _send(self, tokens: list[str], turns: int, fanout: int) -> str:
        """Send turn 1 of every token; returns the done stream's id before sending."""
        done = stream(self.keys, "done")
        last = await self.redis.xrevrange(done, count=1)
        pipe = self.redis.pipeline(transaction=False)
        payload = payloads()["turns"]  # built once: the floor times the relay, not pydantic
        for token in tokens:
            pipe.xadd(stream(self.keys, "turns"), token_fields(payload, token, 1, turns, fanout))
        await pipe.execute()
        return last[0][0].decode() if last else "0-0"

    async def _finished(self, after: str, count: int, timeout_s: float) -> list[bytes]:
        """The payloads of the next ``count`` done entries (XREAD BLOCK, bounded)."""
        done = stream(self.keys, "done")
        found: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < count:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise TimeoutError(f"floor relay: {len(found)} of {count} tokens finished")
            reply = await self.redis.xread({done: after}, count=count, block=min(left_ms, 1000))
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    after = entry_id.decode()
                    found.append(fields[b"d"])
        return found

    async def latency_ms(self, rounds: int, timeout_s: float = 60.0) -> list[float]:
        """Round trips (ms) of one token through ``rounds`` turns of one call each."""
        after = await self._send([new_id()], rounds, 1)
        [payload] = await self._finished(after, 1, timeout_s)
        return [ns / 1e6 for ns in orjson.loads(payload)]

    async def throughput(
        self, tokens: int, turns: int, fanout: int, timeout_s: float = 120.0
    ) -> tuple[int, float]:
        """(calls relayed, seconds) for ``tokens`` concurrent tokens, batched reads."""
        started = time.monotonic()
        after = await self._send([new_id() for _ in range(tokens)], turns, fanout)
        await self._finished(after, tokens, timeout_s)
        return tokens * turns * fanout, time.monotonic() - started
