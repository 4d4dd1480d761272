"""Supervisor: prefixed output, restart after SIGKILL (with a counter), bounded stop_all —
on plain Python children and on the real ingress worker."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.supervisor import Supervisor

SLEEPER = "import time; print('ready', flush=True); time.sleep(120)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(120)"
)


class Lines:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, line: str) -> None:
        with self.lock:
            self.seen.append((name, line))


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture
def sup(lines: Lines) -> Iterator[Supervisor]:
    supervisor = Supervisor(lines, grace_s=2.0)
    try:
        yield supervisor
    finally:
        supervisor.stop_all(grace_s=0.5)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_output_is_prefixed_and_child_is_restarted_after_sigkill(
    sup: Supervisor, lines: Lines
) -> None:
    first = sup.start("sleeper", py(SLEEPER))
    sup.wait_for_line("sleeper", "ready", 10)
    assert ("sleeper", "ready") in lines.seen
    assert sup.pids() == {"sleeper": first}

    sup.kill("sleeper", signal.SIGKILL)
    second = sup.wait_restarted("sleeper", first, timeout_s=5)
    assert second != first and not alive(first)
    assert sup.restarts["sleeper"] == 1
    assert sup.children["sleeper"].exit_codes == [-signal.SIGKILL]

    sup.kill("sleeper", signal.SIGKILL)
    third = sup.wait_restarted("sleeper", second, timeout_s=5)
    assert sup.restarts["sleeper"] == 2 and third not in (first, second)
    assert any("restarting in" in line for name, line in lines.seen if name == "sleeper")


def test_a_child_that_may_not_restart_stays_down(sup: Supervisor) -> None:
    sup.start("once", py("print('bye')"), restart=False)
    sup.wait_for_line("once", "bye", 10)
    deadline = time.monotonic() + 5
    while "once" in sup.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert "once" not in sup.pids() and sup.restarts["once"] == 0
    with pytest.raises(RuntimeError, match="exited"):
        sup.wait_for_line("once", "never", 2)


def test_stop_all_stops_everything_within_the_grace(sup: Supervisor) -> None:
    polite = sup.start("polite", py(SLEEPER))
    stubborn = sup.start("stubborn", py(STUBBORN))
    for name in ("polite", "stubborn"):
        sup.wait_for_line(name, "ready", 10)
    started = time.monotonic()
    codes = sup.stop_all(grace_s=1.0)
    took = time.monotonic() - started
    assert took < 2.5, f"stop_all took {took:.1f}s"
    assert codes == {"polite": -signal.SIGTERM, "stubborn": -signal.SIGKILL}
    assert not alive(polite) and not alive(stubborn)
    assert sup.pids() == {}
    assert sup.restarts["polite"] == sup.restarts["stubborn"] == 0, "a stop is not a crash"
    sup.stop_all(grace_s=0.1)  # twice is safe
    with pytest.raises(RuntimeError):
        sup.start("late", py(SLEEPER))


def test_real_ingress_worker_comes_back_after_sigkill_and_serves(
    sup: Supervisor, settings: Settings, subprocess_env: dict[str, str]
) -> None:
    argv = [sys.executable, "-m", "callgate.services.ingress"]
    first = sup.start("ingress", argv, subprocess_env)
    sup.kill("ingress", signal.SIGKILL)
    sup.wait_restarted("ingress", first, timeout_s=5)
    run_id = f"r-{uuid.uuid4().hex[:12]}"

    async def submit_and_see() -> str:
        async with CallgateClient(settings) as client:
            await client.submit(
                {
                    "run_id": run_id,
                    "api": "openai-chat",
                    "model": "m",
                    "input": "hi",
                    "identity": {"user": "alice"},
                }
            )
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                run = await client.run(run_id)
                if run is not None:
                    return run.status.value
                await asyncio.sleep(0.1)
            raise AssertionError("the restarted ingress never created the run")

    assert asyncio.run(submit_and_see()) == "awaiting_model"
    started = time.monotonic()
    codes = sup.stop_all(grace_s=5.0)
    assert time.monotonic() - started < 5.0, "SIGTERM stops the arq worker promptly"
    assert codes["ingress"] is not None
