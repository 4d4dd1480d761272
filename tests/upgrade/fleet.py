"""An upgrade test's deployment: the outside world from this tree, workers from either release.

The world is conformance's system (`callgate.ops.conformance.runner.system_spec`: the demo
travel and booking services, the scripted model server, one Redis and key prefix) started with no
workers.  A *generation* is a set of worker processes of one release — this tree's, or the
previous release's venv (`SystemSpec.python`) — on the world's Redis, key prefix and environment,
under a supervisor of its own, so stopping it stops those workers and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from callgate.client import CallgateClient
from callgate.errors import NotFoundError
from callgate.ops.conformance.drive import settle
from callgate.ops.conformance.runner import system_spec
from callgate.ops.stack import OPTIONAL_WORKERS, WORKERS
from callgate.ops.system import LocalSystem, SystemSpec
from tests.upgrade.previous_release import Installed

SCENARIOS = Path(__file__).parent / "scenarios"
STOP_GRACE_S = 1.0
"""A stopping worker's grace (``CALLGATE_SHUTDOWN_GRACE_S``): work still in flight after it is
cancelled unacked, for the next generation to reclaim, as in an operator's rolling restart."""
SUPERVISOR_GRACE_S = 3.0
"""Longer than `STOP_GRACE_S`: workers exit on their own; SIGKILL is only the backstop."""
WORLD_GRACE_S = 1.0
"""The services and model server keep nothing worth a graceful stop (the model server may be
holding a mid-turn request that nobody waits for any more)."""
START_S = 30.0
SERVING = r'"msg": ?"serving"'
NO_WORKERS = {kind: 0 for kind in (*WORKERS, *OPTIONAL_WORKERS)}


@contextlib.contextmanager
def world(redis_url: str, env: Mapping[str, str] | None = None) -> Iterator[LocalSystem]:
    """Conformance's system with no workers: services, scripted model (also playing this
    folder's scenarios), a fresh key prefix on ``redis_url``; ``env`` for every worker."""
    base = system_spec(redis_url)
    spec = replace(
        base,
        replicas=NO_WORKERS,
        scenarios=(SCENARIOS,),
        env={**base.env, "CALLGATE_SHUTDOWN_GRACE_S": str(STOP_GRACE_S), **(env or {})},
        grace_s=WORLD_GRACE_S,
    )
    with LocalSystem(spec) as running:
        yield running


def generation(
    outside: LocalSystem, replicas: Mapping[str, int], release: Installed | None = None
) -> LocalSystem:
    """Start ``replicas`` (kind → count; a kind not named: none) of ``release`` (None: this
    tree) against ``outside``'s Redis, key prefix and environment."""
    if release is not None:
        release.check_imports(outside.env, Path.cwd())
        replicas = {kind: n for kind, n in replicas.items() if kind in release.kinds}
    spec = SystemSpec(
        services=(),
        scripted_model=False,
        redis_url=outside.env["REDIS_URL"],
        key_prefix=outside.env["CALLGATE_KEY_PREFIX"],
        env=outside.env,
        replicas={**NO_WORKERS, **replicas},
        python=None if release is None else str(release.python),
        grace_s=SUPERVISOR_GRACE_S,
    )
    return LocalSystem(spec).start()


def wait_serving(workers: LocalSystem, timeout_s: float = START_S) -> None:
    """Until every stream worker of ``workers`` says it is serving (the log line both releases
    print once their consumer groups are read); ingress, an arq worker, says nothing."""
    for kind, names in workers.workers.items():
        for name in names if kind != "ingress" else ():
            workers.supervisor.wait_for_line(name, SERVING, timeout_s)


def tails(generations: Mapping[str, LocalSystem], lines: int = 8) -> str:
    """What each generation's processes printed last, labelled: a failure's context."""
    return "\n".join(
        f"[{label}] {line}" for label, gen in generations.items() for line in gen.tails(lines)
    )


@contextlib.contextmanager
def explained(generations: Mapping[str, LocalSystem]) -> Iterator[None]:
    """A failure inside gets what ``generations`` printed last as a note."""
    try:
        yield
    except Exception as exc:
        exc.add_note(tails(generations))
        raise


async def dead_letters(client: CallgateClient) -> list[str]:
    """Every dead letter of every partition, read with this tree's keys, as ``stream: reason``."""
    found = []
    for partition in range(client.keys.partitions):
        for _, fields in await client.ledger.dead_letters(partition, 100):
            stream = fields.get("stream", b"?").decode()
            found.append(f"{stream}: {fields.get('reason', b'?').decode()}")
    return found


async def describe(client: CallgateClient, run_id: str) -> str:
    """The run as it stands, in one line: status, turn, each call's state."""
    try:
        view = await client.view(run_id)
    except NotFoundError:
        return f"run {run_id} does not exist"
    calls = ", ".join(f"{c['tool']} {c['state']}" for c in view["calls"])
    return f"run {run_id} is {view['status']} at turn {view['turns']} (calls: {calls or 'none'})"


async def settled(
    client: CallgateClient, run_id: str, leaving: str | None, timeout_s: float
) -> str:
    """The next state the run settles in other than ``leaving`` (conformance's `settle`),
    within ``timeout_s``; else an AssertionError saying where the run stands."""
    try:
        async with asyncio.timeout(timeout_s):
            return await settle(client, run_id, leaving)
    except TimeoutError:
        seen = await describe(client, run_id)
        raise AssertionError(f"not settled beyond {leaving} in {timeout_s:g}s: {seen}") from None
