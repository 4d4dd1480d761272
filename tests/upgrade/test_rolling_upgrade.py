"""Upgrade a live deployment from the previous release to this tree, with runs in every resting
state (issue #29).

The previous release's workers (its own venv, `previous_release`) take runs on every protocol
into each state a run can rest in when its workers stop:

* ``paused_approval`` — alice's reservation waits for carol (conformance's ``approval``);
* ``paused_unknown_outcome`` — approved, its answer lost, every lookup inconclusive
  (``resolved-by-person``);
* mid-turn — its second model request in flight, held 30 s by the scripted model
  (``upgrade-mid-turn``: conformance's ``one-call`` with that delay);
* reconciling — approved, its answer lost, two lookups inconclusive, the reconciler waiting for
  its third check (``connection-lost`` with two inconclusive lookups instead of none).

Runs are submitted, and the approvals before the upgrade posted, with this tree's client and
desk: what other services and people use may be upgraded first.  Those workers stop (SIGTERM,
their own grace: work in flight is cancelled unacked) while the
services, the model server and Redis stay; this tree's workers start on the same Redis, key
prefix and environment.  Then carol approves with this tree's desk (the stored approval must
still bind the arguments as this tree hashes and sends them), resolves the unknown write as
applied, and the rest finish alone.  Each run must end exactly as its conformance case does
without an upgrade — states, executions and reservations counted by the services, each call's
path, the results the model received — with no dead letter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import aiohttp
import pytest

from callgate.client import CallgateClient
from callgate.envelopes import new_id
from callgate.ops.conformance.catalogue import APIS, PAUSE, Case, select
from callgate.ops.conformance.checker import check
from callgate.ops.conformance.drive import Context, Trace, approve, observe, run_spec, take
from callgate.ops.conformance.probes import Probes
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.stack import WORKERS
from callgate.ops.system import LocalSystem
from callgate.tools.canonical import args_hash
from callgate.tools.registry import load_registry
from tests.e2e.people import http
from tests.upgrade.fleet import dead_letters, describe, explained, generation, settled, tails, world
from tests.upgrade.previous_release import Installed

pytestmark = pytest.mark.slow

ENV = {"CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.3, 5]"}
"""Two checks at once, then one 5 s later: a reconciliation is stopped between its second and
third check, and one whose lookups stay inconclusive pauses within seconds."""
SETTLE_S = 30.0
POLL_S = 0.05


def _case(case_id: str, **changes: Any) -> Case:
    return replace(select((case_id,))[0], **changes)


APPROVAL = _case("approval")
UNKNOWN = _case("resolved-by-person")
MID_TURN = _case("one-call", id="mid-turn", scenario="upgrade-mid-turn")
"""Its scenario holds the first three asks of the answer (``times``): one run per protocol."""
RECONCILING = _case(
    "connection-lost",
    id="reconciling",
    booking_faults={
        "reserve": {"mode": "commit_then_drop", "count": 1},
        "lookup": {"mode": "lookup_unknown", "count": 2},
    },
)
RESTING: dict[str, tuple[str, tuple[str, ...], int]] = {
    APPROVAL.id: ("paused_approval", ("needs_approval",), 1),
    UNKNOWN.id: ("paused_unknown_outcome", ("unresolved",), 1),
    MID_TURN.id: ("awaiting_model", ("succeeded",), 2),
    RECONCILING.id: ("executing", ("reconciling",), 1),
}
"""Where each case's run rests once the old workers stopped: the run's status, its calls'
states, and how many requests the model server has received for it."""


@dataclass
class Left:
    """A run the old workers leave resting, and what the driver saw of it."""

    case: Case
    api: str
    run_id: str
    trace: Trace = field(default_factory=Trace)


@pytest.fixture(scope="module")
def outside(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    with world(redis_server.url, ENV) as running:
        yield running


def of(runs: list[Left], case: Case) -> list[Left]:
    return [run for run in runs if run.case is case]


async def until_count(read: Callable[[], Awaitable[int]], want: int, what: str) -> None:
    """Until ``read()`` reaches ``want``, within `SETTLE_S`."""
    seen = 0
    try:
        async with asyncio.timeout(SETTLE_S):
            while (seen := await read()) < want:
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise AssertionError(f"{what}: {seen} after {SETTLE_S:g}s, not {want}") from None


async def _lookups(outside: LocalSystem, run_id: str) -> int:
    """Reservation lookups the booking service received for the run (the reconciler's checks)."""
    stats = await http(outside, "booking", "GET", f"/_stats/runs/{run_id}")
    return int(stats["requests"].get("lookup", 0))


async def _asks(probes: Probes, run_id: str) -> int:
    """Requests the model server received for the run."""
    return len(await probes.model_requests(run_id))


async def paused(ctx: Context, run: Left, leaving: str | None, want: str) -> None:
    state = await settled(ctx.client, run.run_id, leaving, SETTLE_S)
    assert state == want, await describe(ctx.client, run.run_id)
    run.trace.states.append(state)


async def leave(ctx: Context, runs: list[Left]) -> None:
    """Take every run to its resting place with the old workers."""
    for run in runs:
        await ctx.probes.arm(run.run_id, run.case)
        await ctx.client.submit(run_spec(run.case, run.api, run.run_id))
    for run in runs:
        if run.case is not MID_TURN:
            await paused(ctx, run, None, PAUSE)
            run.trace.at_pause = await ctx.probes.executions(run.run_id)
    await asyncio.gather(*(approve(ctx.client, run.run_id) for run in of(runs, UNKNOWN)))
    for run in of(runs, UNKNOWN):
        await paused(ctx, run, PAUSE, "paused_unknown_outcome")
    # Only now, and all at once, so that their 5 s wait before the third check outlasts the stop.
    await asyncio.gather(*(approve(ctx.client, run.run_id) for run in of(runs, RECONCILING)))
    for run in of(runs, RECONCILING):
        lookups = partial(_lookups, ctx.system, run.run_id)
        await until_count(lookups, 2, f"lookups of {run.run_id}")
    for run in of(runs, MID_TURN):
        asks = partial(_asks, ctx.probes, run.run_id)
        await until_count(asks, 2, f"model requests of {run.run_id}")


async def resting(ctx: Context, run: Left) -> tuple[str, tuple[str, ...], int]:
    view = await ctx.client.view(run.run_id)
    calls = tuple(str(c["state"]) for c in view["calls"])
    return str(view["status"]), calls, await _asks(ctx.probes, run.run_id)


async def still_bound(client: CallgateClient, run_id: str) -> None:
    """The approval the old validator stored binds the call's arguments as this tree's
    executor will hash what it sends, under this tree's tool version."""
    view = await client.view(run_id)
    [call] = await client.ledger.get_calls(run_id, [c["call_id"] for c in view["calls"]])
    assert call is not None and call.approval_id is not None, view
    record = await client.ledger.get_approval(run_id, call.approval_id)
    tool = load_registry(list(client.settings.tool_modules)).get(call.tool)
    assert record is not None and record.state == "pending" and tool is not None, record
    sent = tool.dump(tool.validate(call.arguments or {}))
    assert (record.args_hash, record.tool_version) == (args_hash(sent), tool.version), record


async def finish(ctx: Context, runs: list[Left]) -> None:
    """What people do after the upgrade, then every run to its end."""
    for run in of(runs, APPROVAL):
        await still_bound(ctx.client, run.run_id)
        await approve(ctx.client, run.run_id)
    assert UNKNOWN.then is not None
    for run in of(runs, UNKNOWN):
        await take(ctx, UNKNOWN.then, run.run_id, run.trace)
    for run in runs:
        leaving = run.trace.states[-1] if run.trace.states else None
        run.trace.states.append(await settled(ctx.client, run.run_id, leaving, SETTLE_S))


async def left_by(previous: Installed, ctx: Context, runs: list[Left]) -> None:
    """The previous release's workers take ``runs`` to their resting places, then stop; each
    run must rest where `RESTING` says."""
    old = generation(ctx.system, {kind: 1 for kind in WORKERS}, previous)
    label = {f"previous release {previous.release.version}": old}
    try:
        with explained(label):
            await leave(ctx, runs)
    finally:
        old.stop()
    found = {run.run_id: (await resting(ctx, run), RESTING[run.case.id]) for run in runs}
    moved = [f"{run}: left {got}, not {want}" for run, (got, want) in found.items() if got != want]
    with explained(label):
        assert moved == [], "\n".join(moved)


async def test_every_resting_state_completes_as_without_the_upgrade(
    outside: LocalSystem, previous: Installed
) -> None:
    cases = (APPROVAL, UNKNOWN, MID_TURN, RECONCILING)
    runs = [Left(c, api, f"up-{c.id}-{api}-{new_id()[:8]}") for c in cases for api in APIS]
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        CallgateClient(outside.settings) as client,
    ):
        ctx = Context(outside, client, Probes(session, outside.urls))
        await left_by(previous, ctx, runs)
        new = {"this tree": generation(outside, {kind: 1 for kind in WORKERS})}
        try:
            with explained(new):
                await finish(ctx, runs)
                cells = [check(r.case, r.api, await observe(ctx, r.run_id, r.trace)) for r in runs]
                letters = await dead_letters(client)
        finally:
            new["this tree"].stop()
    problems = [f"{c.case} × {c.api}: {c.detail}" for c in cells if not c.passed]
    assert problems == letters == [], "\n".join([*problems, *letters, tails(new)])
