"""A small process supervisor for `callgate up`, `callgate demo` and the chaos tests.

Each child runs in its own session (so a terminal's Ctrl-C reaches the supervisor, which then
stops children in an orderly way, and a child's own children die with its group).  Output is
prefixed with the child's name; a child that dies while the supervisor is not stopping is
restarted after an exponential back-off, and ``restarts[name]`` counts it, because the chaos
tests SIGKILL workers and rely on them coming back.  Everything is bounded in time:
`stop_all` sends SIGTERM, waits at most ``grace_s``, then SIGKILLs what is left.

Sync and thread-based on purpose: it is used from plain CLI code and from tests alike, and a
monitor thread keeps supervising while the caller blocks on something else.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0
HEALTHY_AFTER_S = 10.0
"""A child that ran this long before dying restarts without back-off from earlier crashes."""
POLL_S = 0.05
TAIL_LINES = 200

Sink = Callable[[str, str], None]
"""Receives (name, line) for every line a child prints."""


def prefix_sink(stream: IO[str] | None = None) -> Sink:
    """A sink writing ``name | line`` to ``stream`` (stderr by default)."""
    lock = threading.Lock()

    def write(name: str, line: str) -> None:
        with lock:
            out = stream or sys.stderr
            out.write(f"{name:>12} | {line}\n")
            out.flush()

    return write


def quiet_sink(name: str, line: str) -> None:
    """Keeps only the per-child tail (`Supervisor.tail`); prints nothing."""


@dataclass
class Child:
    """One named child and how it is doing."""

    name: str
    argv: list[str]
    env: dict[str, str] | None
    restart: bool
    process: subprocess.Popen[str] | None = None
    started_at: float = 0.0
    failures: int = 0
    """Consecutive quick deaths; drives the back-off."""
    restart_at: float | None = None
    finished: bool = False
    """Exited and will not be restarted."""
    exit_codes: list[int] = field(default_factory=list)
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES)
    )
    line_seen: threading.Condition = field(default_factory=threading.Condition)


class Supervisor:
    """Start, watch, restart and stop named child processes."""

    def __init__(self, sink: Sink | None = None, *, grace_s: float = 5.0) -> None:
        self.sink: Sink = sink or prefix_sink()
        self.grace_s = grace_s
        self.children: dict[str, Child] = {}
        self.restarts: collections.Counter[str] = collections.Counter()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._monitor.start()

    # -- public API -------------------------------------------------------------------------

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        restart: bool = True,
    ) -> int:
        """Start ``argv`` as child ``name`` (env None = inherit ours); returns its pid."""
        with self._lock:
            if self._stopping.is_set():
                raise RuntimeError("the supervisor is stopping")
            if name in self.children:
                raise ValueError(f"a child named {name!r} exists already")
            child = Child(name, list(argv), None if env is None else dict(env), restart)
            self.children[name] = child
            self._spawn(child)
            assert child.process is not None
            return child.process.pid

    def pids(self) -> dict[str, int]:
        """The pid of every child that is running now."""
        with self._lock:
            return {
                name: c.process.pid
                for name, c in self.children.items()
                if c.process is not None and c.process.poll() is None
            }

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the child (not its group): what a crash or an OOM kill looks like."""
        with self._lock:
            process = self.children[name].process
            if process is not None and process.poll() is None:
                process.send_signal(sig)

    def tail(self, name: str) -> list[str]:
        """The last lines the child printed (kept even when the sink is quiet)."""
        with self._lock:
            return list(self.children[name].tail)

    def wait_for_line(self, name: str, pattern: str, timeout_s: float) -> re.Match[str]:
        """Block until child ``name`` prints a line matching ``pattern``; raise on timeout/exit."""
        child = self.children[name]
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with child.line_seen:
            while True:
                for line in child.tail:
                    match = regex.search(line)
                    if match:
                        return match
                if child.finished:
                    raise RuntimeError(f"{name} exited: {' / '.join(list(child.tail)[-5:])}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{name} printed no line matching {pattern!r}")
                child.line_seen.wait(min(left, 0.1))

    def wait_restarted(self, name: str, old_pid: int, timeout_s: float) -> int:
        """Block until ``name`` runs again under a pid other than ``old_pid``; return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.pids().get(name)
            if pid is not None and pid != old_pid:
                return pid
            time.sleep(POLL_S)
        raise TimeoutError(f"{name} was not restarted within {timeout_s}s")

    def stop_all(self, grace_s: float | None = None) -> dict[str, int | None]:
        """SIGTERM every child, SIGKILL those still alive after ``grace_s``; return exit codes.

        Safe to call twice.  Bounded: returns within about ``grace_s`` + 1 s.
        """
        grace = self.grace_s if grace_s is None else grace_s
        self._stopping.set()
        with self._lock:
            children = list(self.children.values())
        for child in children:
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            _wait(child.process, deadline - time.monotonic())
        for child in children:
            if child.process is not None and child.process.poll() is None:
                _signal_group(child.process, signal.SIGKILL)
                _wait(child.process, 1.0)
        self._monitor.join(timeout=1.0)
        return {c.name: None if c.process is None else c.process.poll() for c in children}

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    # -- internals --------------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        process = subprocess.Popen(
            child.argv,
            env=child.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        child.process = process
        child.started_at = time.monotonic()
        child.restart_at = None
        threading.Thread(
            target=self._pump, args=(child, process), name=f"out-{child.name}", daemon=True
        ).start()

    def _pump(self, child: Child, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            with child.line_seen:
                child.tail.append(line)
                child.line_seen.notify_all()
            self.sink(child.name, line)
        process.stdout.close()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                for child in self.children.values():
                    self._check(child)
            self._stopping.wait(POLL_S)

    def _check(self, child: Child) -> None:
        """Notice a death, schedule the restart with back-off, and restart when due."""
        now = time.monotonic()
        process = child.process
        if process is None or child.finished or self._stopping.is_set():
            return
        code = process.poll()
        if code is None:
            return
        if child.restart_at is None:
            child.exit_codes.append(code)
            if not child.restart:
                child.finished = True
                return
            ran_s = now - child.started_at
            child.failures = 1 if ran_s >= HEALTHY_AFTER_S else child.failures + 1
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (child.failures - 1))
            child.restart_at = now + delay
            self.sink(child.name, f"[supervisor] exited with {code}; restarting in {delay:.1f}s")
        elif now >= child.restart_at:
            self.restarts[child.name] += 1
            self._spawn(child)


def _signal_group(process: subprocess.Popen[str] | None, sig: int) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _wait(process: subprocess.Popen[str] | None, timeout_s: float) -> None:
    if process is None:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=max(0.0, timeout_s))
