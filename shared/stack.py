"""The processes of one callgate deployment, as data, and how `callgate up`/`demo` start them.

Every worker is its own process (`python -m services.<name>`), supervised by
`shared.supervisor.Supervisor`.  The environment passes through unchanged (so
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` and the keys reach the workers); only
``REDIS_URL`` is added when an embedded Redis had to be started.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, MutableMapping, Sequence
from types import FrameType

from shared.config import Settings
from shared.embedded_redis import EmbeddedRedis, redis_answers
from shared.supervisor import Supervisor

WORKERS: tuple[str, ...] = ("ingress", "model_turn", "validator", "executor", "reconciler")
"""Every worker kind, in start order; one not yet written (no module) is skipped."""

Progress = Callable[[str], None]


def progress_to_stderr(message: str) -> None:
    print(f"callgate: {message}", file=sys.stderr, flush=True)


def worker_argv(name: str) -> list[str]:
    return [sys.executable, "-m", f"services.{name}"]


def available_workers(names: Sequence[str] = WORKERS) -> list[str]:
    """The workers whose module exists in this installation."""
    return [n for n in names if importlib.util.find_spec(f"services.{n}") is not None]


def default_redis_url() -> str:
    default = Settings.model_fields["redis_url"].default
    assert isinstance(default, str)
    return default


def ensure_redis(env: MutableMapping[str, str], progress: Progress) -> EmbeddedRedis | None:
    """Use ``REDIS_URL`` if it answers; else start an embedded Redis and export its URL."""
    url = env.get("REDIS_URL") or default_redis_url()
    if redis_answers(url):
        progress(f"using Redis at {url}")
        env["REDIS_URL"] = url
        return None
    server = EmbeddedRedis(appendonly=True).start()
    env["REDIS_URL"] = server.url
    progress(f"{url} does not answer; started an embedded Redis at {server.url}")
    return server


def settings_from(env: MutableMapping[str, str]) -> Settings:
    """The settings the children will read from ``env`` (Redis and prefix are what matter)."""
    return Settings(
        redis_url=env.get("REDIS_URL") or default_redis_url(),
        key_prefix=env.get("CALLGATE_KEY_PREFIX", "cg"),
    )


def start_workers(
    supervisor: Supervisor, env: MutableMapping[str, str], names: Sequence[str] | None = None
) -> list[str]:
    """Start each worker under ``supervisor`` with ``env``; returns the names started."""
    started = available_workers(WORKERS if names is None else names)
    for name in started:
        supervisor.start(name, worker_argv(name), dict(env))
    return started


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
