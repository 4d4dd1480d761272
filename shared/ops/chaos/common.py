"""Small helpers the chaos modules share: waiting that a stop cuts short, "Redis is away",
polling until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from callgate.errors import RedisUnavailableError
from callgate.streams.commands import REDIS_ERRORS

REDIS_AWAY: tuple[type[Exception], ...] = (*REDIS_ERRORS, RedisUnavailableError)
"""What a chaos task sees while Redis restarts: it retries, it never gives up."""


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``stop`` is set first; True if it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def poll(
    step: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    every_s: float,
    log: logging.Logger,
    name: str,
) -> None:
    """Run ``step`` every ``every_s`` until ``stop`` is set.  A step that finds Redis away is
    logged and runs again next time: a chaos task never gives up while Redis restarts."""
    while True:
        try:
            await step()
        except REDIS_AWAY as exc:
            log.info("%s: redis unavailable (%s); retrying", name, type(exc).__name__)
        if await pause(stop, every_s):
            return


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
