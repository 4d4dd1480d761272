"""The worker kinds of a deployment and the small process plumbing the commands share.

Every worker is its own process (`python -m services.<name>`); `callgate.ops.system.LocalSystem`
starts them under a `callgate.ops.supervisor.Supervisor`.  Signals: a long-running command stops its
children in ``finally`` blocks, so SIGTERM is made to unwind like Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

import orjson

from callgate.config import Settings

WORKERS: tuple[str, ...] = ("ingress", "model_turn", "validator", "executor", "reconciler")
"""Every worker kind, in start order; one not yet written (no module) is skipped."""
OPTIONAL_WORKERS: tuple[str, ...] = ("webhooks",)
"""Worker kinds started only when asked for (`SystemSpec.replicas`): `callgate dev` and `up`
start the webhooks worker, which also keeps the counters /metrics exports."""

Progress = Callable[[str], None]


def progress_to_stderr(message: str) -> None:
    print(f"callgate: {message}", file=sys.stderr, flush=True)


def print_figures(fig: Mapping[str, Any], text: str, *, as_json: bool) -> None:
    """A long command's result on stdout: its figures as JSON, or the text a person reads."""
    if as_json:
        sys.stdout.write(orjson.dumps(fig, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(text)


def worker_argv(name: str) -> list[str]:
    return [sys.executable, "-m", f"callgate.services.{name}"]


def available_workers(names: Sequence[str] = WORKERS) -> list[str]:
    """The workers whose module exists in this installation."""
    return [n for n in names if importlib.util.find_spec(f"callgate.services.{n}") is not None]


def default_redis_url() -> str:
    default = Settings.model_fields["redis_url"].default
    assert isinstance(default, str)
    return default


def wait_for_stop_signal() -> int:
    """Block the main thread until SIGINT or SIGTERM; return the signal number."""
    received = threading.Event()
    got: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        received.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not received.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return got[0]


def sigterm_as_interrupt() -> None:
    """Make SIGTERM unwind like Ctrl-C, so ``finally`` blocks stop the children we started."""

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)


def base_env() -> dict[str, str]:
    """Our environment, unchanged, plus unbuffered output so prefixed logs arrive in time."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env
