"""Scenario ``instructions``: what the ledger's steps cost Redis, counted rather than timed.

A private Redis records (MONITOR) every `apply.lua` EVALSHA of a batch of throughput runs; a
fresh redis-server started under valgrind's callgrind, counting only inside
``evalShaCommand``, replays them in their order (each step's guards hold again, because the
ledger keys it reads were written by the steps before it).  The count is the same on every
run of the same code and workload, whatever else the machine is doing, so a change that
makes a step a few percent dearer shows, where Redis's CPU time on a shared VM varies by a
quarter.  Needs valgrind; without it the scenario says so and reports nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import redis

from callgate.ledger.group import APPLY_LUA, APPLY_SHA, step_replies
from callgate.ops.bench import throughput
from callgate.ops.bench.harness import Deployment
from callgate.ops.embedded_redis import EmbeddedRedis, find_redis_server, free_port
from callgate.ops.stack import Progress

_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {b"n": 10, b"r": 13, b"t": 9, b"a": 7, b"b": 8, b'"': 34, b"\\": 92}
_PIPELINE = 50
_START_TIMEOUT_S = 120

_LINE_LIMIT = 64 * 2**20
"""A MONITOR line is one script call: up to `MAX_GROUP_STEPS` steps with all their values."""


async def measure(api: str, runs: int, progress: Progress) -> dict[str, Any]:
    """Redis instructions per ledger step and per tool call, for ``runs`` throughput runs."""
    if shutil.which("valgrind") is None:
        progress("instructions: valgrind is not installed; skipped")
        return {"skipped": "valgrind is not installed"}
    scripts, calls = await _capture(api, runs, progress)
    progress(f"instructions: replaying {len(scripts)} script calls under callgrind")
    replayed = await asyncio.to_thread(_replay, scripts)
    names = Counter(name for script in scripts for name in script[-1].decode().split("+"))
    steps = sum(names.values())
    return {
        "script_calls": len(scripts),
        "steps": steps,
        "calls": calls,
        "steps_per_call": steps / calls,
        "steps_per_script_call": steps / len(scripts),
        "failed_steps": replayed["failed"],
        "instructions_per_step": replayed["instructions"] / steps,
        "instructions_per_call": replayed["instructions"] / calls,
        "steps_by_name": dict(names.most_common()),
        "redis_server": replayed["server"],
    }


async def _capture(api: str, runs: int, progress: Progress) -> tuple[list[list[bytes]], int]:
    """The apply EVALSHAs of ``runs`` runs on a private Redis, in order, and the tool calls."""
    server = await asyncio.to_thread(EmbeddedRedis().start)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=_LINE_LIMIT)
        writer.write(b"MONITOR\r\n")
        await writer.drain()
        lines: list[bytes] = []
        watching = asyncio.create_task(_read_lines(reader, lines))
        async with Deployment(server.url, progress=progress) as deployment:
            progress(f"instructions: {runs} runs x {throughput.TURNS} turns, under MONITOR")
            measured = await throughput.pipeline(deployment, api, runs)
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        writer.close()
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)
    return _apply_steps(lines), int(measured["calls"])


async def _read_lines(reader: asyncio.StreamReader, into: list[bytes]) -> None:
    while line := await reader.readline():
        into.append(line.rstrip(b"\r\n"))


def _apply_steps(lines: list[bytes]) -> list[list[bytes]]:
    """The EVALSHAs of apply.lua that clients sent (not commands scripts ran), as argv."""
    sha = APPLY_SHA.encode()
    steps = []
    for line in lines:
        if b'"EVALSHA"' not in line[:100].upper() or b" lua]" in line[:100]:
            continue
        argv = [_unescape(arg) for arg in _ARG.findall(line)]
        if len(argv) > 2 and argv[0].upper() == b"EVALSHA" and argv[1] == sha:
            steps.append(argv)
    return steps


def _unescape(text: bytes) -> bytes:
    r"""One MONITOR argument as it was sent (Redis quotes it: \n, \", \\, \xHH, …)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i : i + 1] != b"\\":
            out.append(text[i])
            i += 1
        elif text[i + 1 : i + 2] == b"x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append(_ESCAPES[text[i + 1 : i + 2]])
            i += 2
    return bytes(out)


def _replay(steps: list[list[bytes]]) -> dict[str, Any]:
    """Run ``steps`` in order on a fresh redis-server under callgrind: its count, and the steps
    whose guards failed (as they did in the run: a lost race is lost again)."""
    binary, port = find_redis_server(), free_port()
    out = Path(tempfile.mkdtemp(prefix="callgate-callgrind-")) / "callgrind.out"
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--toggle-collect=evalShaCommand", binary, "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_timeout=_START_TIMEOUT_S)
    try:
        _wait_ready(client)
        client.script_load(APPLY_LUA)
        failed = 0
        for start in range(0, len(steps), _PIPELINE):
            pipe = client.pipeline(transaction=False)
            for argv in steps[start : start + _PIPELINE]:
                pipe.evalsha(APPLY_SHA, int(argv[2]), *cast(list[str], argv[3:]))
            replies = pipe.execute(raise_on_error=False)
            for argv, reply in zip(steps[start : start + _PIPELINE], replies, strict=True):
                names = argv[-1].count(b"+") + 1
                failed += sum(
                    1 for r in step_replies(reply, names) if isinstance(r, Exception) or r[0] != 1
                )
        client.shutdown(nosave=True)
    finally:
        client.close()
        process.wait(timeout=_START_TIMEOUT_S)
    return {"instructions": _total(out), "failed": failed, "server": binary}


def _wait_ready(client: redis.Redis) -> None:
    for _ in range(_START_TIMEOUT_S * 10):
        with contextlib.suppress(redis.ConnectionError):
            client.ping()
            return
        time.sleep(0.1)
    raise RuntimeError("redis-server under valgrind did not start")


def _total(out: Path) -> int:
    """The instruction count callgrind wrote (its ``summary:`` or ``totals:`` line)."""
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no total to {out}")
