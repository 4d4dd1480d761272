"""Signed webhooks end to end: every worker, the booking service, the scripted model, and the
webhooks worker as its own process, started only once the first run already waits for a person
(it catches up from the event logs).  Three receivers in the test:

* ``ops`` takes every event: it gets each exactly once, each signed, and a tampered or forged
  copy fails the documented check;
* ``late`` takes ``run.finished`` and is down at first: its deliveries fail, and arrive once it
  is up;
* ``broken`` takes ``outcome.unknown`` and answers 500: the delivery uses up its retries and
  `callgate dead-letters` lists it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.ops.control_cli import resolve
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from callgate.ops.stack import worker_argv
from callgate.ops.system import LocalSystem
from callgate.webhooks.signing import SIGNATURE_HEADER, sign, verify
from tests.e2e.people import approve, connected, deployment, http, status, until

pytestmark = pytest.mark.slow

SECRETS = {
    "ops": b"ops-secret-0123456789abcdef",
    "late": b"late-secret-0123456789abcd",
    "broken": b"broken-secret-0123456789ab",
}
PORTS = {name: free_port() for name in SECRETS}
ENDPOINTS = [
    {"name": "ops", "url": f"http://127.0.0.1:{PORTS['ops']}/hook", "secret_env": "OPS_SECRET"},
    {
        "name": "late",
        "url": f"http://127.0.0.1:{PORTS['late']}/hook",
        "secret": SECRETS["late"].decode(),
        "events": ["run.finished"],
    },
    {
        "name": "broken",
        "url": f"http://127.0.0.1:{PORTS['broken']}/hook",
        "secret": SECRETS["broken"].decode(),
        "events": ["outcome.unknown"],
    },
]
WEBHOOK_ENV = {
    "CALLGATE_WEBHOOK_ENDPOINTS": orjson.dumps(ENDPOINTS).decode(),
    "CALLGATE_WEBHOOK_RETRY_SCHEDULE_S": "[0.5, 1, 2, 3]",
    "OPS_SECRET": SECRETS["ops"].decode(),
}
LOST_AND_INCONCLUSIVE = {
    "reserve": {"mode": "commit_then_drop", "count": 1},
    "lookup": {"mode": "lookup_unknown"},
}


class Receiver:
    """An HTTP endpoint recording each delivery (headers and raw body)."""

    def __init__(self, name: str, status: int = 200) -> None:
        self.name, self.status = name, status
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.hook)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", PORTS[self.name]).start()

    async def hook(self, request: web.Request) -> web.Response:
        self.got.append((dict(request.headers), await request.read()))
        return web.Response(status=self.status)

    def events(self) -> list[dict[str, Any]]:
        return [orjson.loads(body) for _, body in self.got]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    yield from deployment(
        redis_server, ("booking",), {"CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.2, 0.4]"}
    )


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    async with connected(system, reset=("booking",)) as c:
        yield c


@contextlib.asynccontextmanager
async def receivers(*names: str) -> AsyncIterator[dict[str, Receiver]]:
    found = {name: Receiver(name, 500 if name == "broken" else 200) for name in SECRETS}
    for name in names:
        await found[name].start()
    try:
        yield found
    finally:
        for receiver in found.values():
            await receiver.stop()


async def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout_s: float = 30,
    seen: Callable[[], Any] = lambda: None,
) -> Any:
    """``check()``'s first truthy answer; else fail saying what ``seen()`` shows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; seen: {seen()}")


def start_webhooks_worker(system: LocalSystem) -> None:
    system.supervisor.start("webhooks", worker_argv("webhooks"), {**system.env, **WEBHOOK_ENV})


async def unknown_outcome_run(system: LocalSystem, client: CallgateClient) -> str:
    """A run whose approved reservation lost its answer and could not be looked up, resolved
    as applied by carol: it pauses twice and completes."""
    await http(system, "booking", "POST", "/_faults", LOST_AND_INCONCLUSIVE)
    run_id = await client.submit(
        {
            "api": "openai-chat",
            "model": "conf-reserve",
            "input": "book",
            "identity": {"user": "alice"},
            "allowed_tools": ["reserve_seat"],
        }
    )
    await until(client, run_id, status("paused_approval"))
    await approve(system, client, run_id)
    await until(client, run_id, status("paused_unknown_outcome"))
    carol = signer_of(system.settings, "carol")
    code, said = await resolve(
        client, run_id, "t1.0", "applied", carol, result={"reservation_id": "r-ok"}
    )
    assert code == 0, said
    await until(client, run_id, status("completed"))
    return run_id


async def dead_letters(system: LocalSystem) -> list[dict[str, Any]]:
    """`callgate dead-letters --json`, as an operator runs it."""
    cli = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "callgate.ops.cli",
        "dead-letters",
        "--json",
        env=system.env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(cli.communicate(), 30)
    assert cli.returncode == 0
    rows: list[dict[str, Any]] = orjson.loads(out)
    return rows


async def test_each_event_reaches_each_endpoint_once_signed_late_or_dead_lettered(
    system: LocalSystem, client: CallgateClient
) -> None:
    async with receivers("ops", "broken") as got:
        first = await client.submit(
            {
                "api": "openai-responses",
                "model": "conf-reserve",
                "input": "book",
                "identity": {"user": "alice"},
                "allowed_tools": ["reserve_seat"],
            }
        )
        await until(client, first, status("paused_approval"))
        start_webhooks_worker(system)  # down until now: it catches up from the event log
        await approve(system, client, first)
        await until(client, first, status("completed"))
        stats = system.settings.key_prefix + ":webhooks:stats"
        await wait_for(lambda: client.redis.hget(stats, "late|failed"), "late's first failure")
        await got["late"].start()
        second = await unknown_outcome_run(system, client)

        expected = Counter(
            {
                (first, "approval.requested"): 1,
                (first, "run.paused"): 1,
                (first, "run.finished"): 1,
                (second, "approval.requested"): 1,
                (second, "run.paused"): 2,
                (second, "outcome.unknown"): 1,
                (second, "run.finished"): 1,
            }
        )

        def seen() -> dict[str, list[tuple[str, str]]]:
            return {
                name: [(e["run_id"], e["type"]) for e in receiver.events()]
                for name, receiver in got.items()
            }

        await wait_for(lambda: len(got["ops"].got) >= 8, "every event at ops", seen=seen)
        await wait_for(lambda: len(got["late"].got) >= 2, "both run.finished at late", seen=seen)

        async def webhook_letters() -> list[dict[str, Any]]:
            return [r for r in await dead_letters(system) if r["stream"] == "webhooks"]

        rows = await wait_for(webhook_letters, "broken's dead letter", seen=seen)
        await asyncio.sleep(1.5)  # a duplicate would be in flight by now

    ops = got["ops"].events()
    assert Counter((e["run_id"], e["type"]) for e in ops) == expected
    assert len({e["id"] for e in ops}) == 8, "each event once"
    paused = [
        e["data"]["status"]
        for e in sorted(ops, key=lambda e: e["created_ms"])
        if e["type"] == "run.paused" and e["run_id"] == second
    ]  # deliveries are unordered
    assert paused == ["paused_approval", "paused_unknown_outcome"]
    asked = next(e for e in ops if e["type"] == "approval.requested" and e["run_id"] == first)
    assert asked["data"]["tool"] == "reserve_seat" and asked["data"]["approver_role"]
    assert sorted((e["run_id"], e["type"]) for e in got["late"].events()) == sorted(
        [(first, "run.finished"), (second, "run.finished")]
    )

    for name in ("ops", "late"):
        for headers, body in got[name].got:
            assert verify(SECRETS[name], headers[SIGNATURE_HEADER], body), name
    headers, body = got["ops"].got[0]
    assert not verify(SECRETS["ops"], headers[SIGNATURE_HEADER], body.replace(b"}", b" }", 1))
    forged = sign(b"mallory-guessed-secret-000000", body, int(time.time()))
    assert not verify(SECRETS["ops"], forged, body)
    assert not verify(SECRETS["late"], headers[SIGNATURE_HEADER], body), "another's secret"

    assert len(rows) == 1 and rows[0]["run_id"] == second
    assert rows[0]["kind"] == "webhook_delivery" and rows[0]["delivery_count"] == 5
    assert "broken" in rows[0]["reason"] and "HTTP 500" in rows[0]["reason"]
    assert [e["type"] for e in got["broken"].events()] == ["outcome.unknown"] * 5
