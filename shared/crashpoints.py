"""Deterministic crash points: a worker can be told to SIGKILL itself at a named boundary.

``CALLGATE_CRASH_AT="executor.after_request"`` (comma-separated for several) makes the
process kill itself the first time it reaches that boundary, so recovery can be tested
at every boundary rather than only at random moments.  ``CALLGATE_CRASH_ONCE_FILE``, when
set, names a marker file: the crash happens only if the file does not exist yet (it is
created just before dying), so a restarted process runs on past the boundary.

Every boundary, and which effect kinds reach it, is listed in `callgate.ops.chaos.boundaries`;
``callgate chaos --crash-points`` walks them all.  The schedule explorer runs every worker in
one process: it sets `on_boundary`, which may raise to drop the handler where it stands.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from functools import cache

on_boundary: Callable[[str], None] | None = None
"""Called at every boundary before the armed check (`callgate.ops.explore`); None in workers."""


@cache
def _armed() -> frozenset[str]:
    raw = os.environ.get("CALLGATE_CRASH_AT", "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def crash_point(name: str) -> None:
    """Die here, without cleanup, if this boundary is armed."""
    if on_boundary is not None:
        on_boundary(name)
    if name not in _armed():
        return
    marker = os.environ.get("CALLGATE_CRASH_ONCE_FILE")
    if marker:
        try:
            fd = os.open(f"{marker}.{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
    sys.stderr.write(f"crash point {name}: SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
