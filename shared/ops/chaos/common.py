"""Small helpers the chaos modules share: waiting that a stop cuts short, "Redis is away"."""

from __future__ import annotations

import asyncio
import contextlib

from callgate.errors import RedisUnavailableError
from callgate.streams.commands import REDIS_ERRORS

REDIS_AWAY: tuple[type[Exception], ...] = (*REDIS_ERRORS, RedisUnavailableError)
"""What a chaos task sees while Redis restarts: it retries, it never gives up."""


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``stop`` is set first; True if it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
