"""Run a worker's coroutine on the fastest event loop this machine has.

uvloop halves the event loop's own cost per message (its transports and callbacks are C);
a worker spends most of its CPU there, between Redis replies.  It is a dependency only
where it builds (not on Windows): elsewhere the standard loop runs the same code.  The
benchmark's floor relay runs on the same loop, so the ratios compare like with like.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
