"""A tiny real worker process for the stream-loop tests, and the handler it runs.

The handler's behaviour is data: the `TurnRequest.reason` of each message says what to do
(``ok``, ``sleep:<s>``, ``gate``, ``block``, ``crash_after_effect``, ``fail``, ``fatal``).
Its "ledger" is one Lua step, SET NX + INCR, so a redelivery of an applied message is a no-op;
every invocation is also counted in Redis, so tests can see what happened in a killed process.

Run: ``python -m tests.integration.stream_worker_proc --group G --consumer C [--rescuer]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.crashpoints import crash_point
from callgate.envelopes import Envelope, TurnRequest, encode
from callgate.errors import NotFoundError
from callgate.keys import Keys
from callgate.streams.service import install_signal_handlers
from callgate.streams.worker import Delivery, Handler, StreamWorker

_APPLY = """
if redis.call('SET', KEYS[1], '1', 'NX') then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"""


def stream_name(settings: Settings) -> str:
    return Keys(settings.key_prefix, settings.partitions).stream("turns", 0)


def tkey(settings: Settings, what: str, msg_id: str) -> str:
    """Same slot as the stream: ``<prefix>:{p0}:t:<what>:<msg_id>``."""
    return f"{settings.key_prefix}:{{p0}}:t:{what}:{msg_id}"


def message(behaviour: str, run_id: str = "run-1") -> bytes:
    return encode(TurnRequest(run_id=run_id, turn=1, reason=behaviour))


async def _wait_for_key(redis: aioredis.Redis, key: str) -> None:
    while not await redis.exists(key):
        await asyncio.sleep(0.02)


def ledger_handler(redis: aioredis.Redis, settings: Settings, *, rescuer: bool = False) -> Handler:
    """The idempotent test handler; a ``rescuer`` ignores the blocking/crashing behaviours."""
    apply = redis.register_script(_APPLY)

    async def handle(envelope: Envelope, delivery: Delivery) -> None:
        assert isinstance(envelope, TurnRequest)
        msg_id, behaviour = envelope.msg_id, envelope.reason

        def key(what: str) -> str:
            return tkey(settings, what, msg_id)

        pipe = redis.pipeline(transaction=False)
        pipe.incr(key("deliveries"))
        pipe.rpush(key("counts"), delivery.delivery_count)
        await pipe.execute()
        if behaviour == "fail":
            raise RuntimeError("handler always fails")
        if behaviour == "fatal":
            raise NotFoundError("run does not exist")
        if not rescuer:
            if behaviour.startswith("sleep:"):
                await asyncio.sleep(float(behaviour.split(":", 1)[1]))
            elif behaviour == "gate":
                await _wait_for_key(redis, key("gate"))
            elif behaviour == "block":
                await asyncio.Event().wait()
        applied = await apply(keys=[key("ledger"), key("effects")])
        if not applied:
            await redis.incr(key("noop"))
        if behaviour == "crash_after_effect" and not rescuer:
            crash_point("streams_test.after_effect")

    return handle


async def _main(args: argparse.Namespace) -> None:
    settings = Settings()
    redis = aioredis.Redis.from_url(settings.redis_url)
    worker = StreamWorker(
        redis,
        settings,
        group=args.group,
        streams=[stream_name(settings)],
        handler=ledger_handler(redis, settings, rescuer=args.rescuer),
        consumer=args.consumer,
    )
    install_signal_handlers(worker)
    try:
        await worker.run()
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--rescuer", action="store_true")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
