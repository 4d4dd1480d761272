"""Stranded calls: tool calls of live runs that sit, past every allowance, in a state a worker
should have moved them on from (issue 28, "nothing is stranded").  `callgate doctor` lists them;
`callgate chaos` requires none at the end of a session.

A call is judged only in a run that has not ended (an ended run's calls are the end's business),
and never while it waits for a person, who has an inbox entry for it:

* ``needs_approval`` (the pending approvals) and ``unresolved`` (the unresolved calls);
* a write held for the batch's approvals while one of them is pending: an ``approved`` one
  always, an ``allowed`` one under ``hold_effects`` (`CallSteps.decide_calls`,
  `ApprovalSteps._release_if_last`);
* a write chained behind an earlier write of its turn on the same resource that has not ended
  yet (`callgate.ledger.dispatch`): the earlier one is the call to look at.

Every other non-terminal state (``requested``, ``allowed``, ``approved``, ``executing``,
``unknown``, ``reconciling``) is owed a move by a worker: it is stranded once its last
transition is older than `limit_ms`.  That limit is what the stream loop allows before it gives
up on a message and its dead-letter hook settles the call itself: ``max_deliveries``
deliveries, each allowed the work of the hop plus two ``claim_idle_ms`` (one for a dead
consumer's message to go idle, one for the reclaim check and the hop's own commands).  The work
is the tool's ``timeout_s`` (the executor's limit), the turn's timeouts summed for
``requested`` (the validator checks a turn's preconditions one after another), and for
``unknown`` / ``reconciling`` every check of ``reconcile_schedule_s`` with its delay and its
timeout.  A deployment far behind its streams can pass the limit with nothing wrong: the
listing says what to look at, it changes nothing.

Found through the runs index (`callgate.ops.inspect_cli.find_runs`, as ``callgate runs`` finds
runs) and each live run's own index of calls, never by scanning the keyspace; the reads of one
page of runs share round trips (`callgate.ledger.pipeline.AutoPipeline`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from callgate.clock import now_ms
from callgate.config import Settings
from callgate.ledger.dispatch import RUNNABLE
from callgate.ledger.reads import Reads
from callgate.ops.inspect_cli import SCAN_PAGE, find_runs
from callgate.records import CallRecord, Effect, RunRecord
from callgate.states import CALL_TERMINAL, RUN_TERMINAL, CallState, RunState
from callgate.tools.registry import RegistryError, load_registry

C = CallState
PERSON = frozenset({C.NEEDS_APPROVAL, C.UNRESOLVED})
"""States only a person moves a call on from (an approval; a resolution)."""
RECONCILE = frozenset({C.UNKNOWN, C.RECONCILING})
LIVE = frozenset(RunState) - RUN_TERMINAL
MAX_RUNS = 1_000_000
"""Live runs read per partition: in practice all of them."""
WRITES = (Effect.WRITE, Effect.IDEMPOTENT_WRITE)

TimeoutOf = Callable[[str], float]
"""A tool's ``timeout_s`` by its name."""


@dataclass(frozen=True, slots=True)
class StrandedCall:
    """One call no worker will move on by itself."""

    run_id: str
    call_id: str
    tool: str
    state: CallState
    age_ms: int
    """Since the call was last owed a move (its transition, or its run's or chain's)."""
    limit_ms: int
    """How long the workers may take (`limit_ms`)."""

    def line(self) -> str:
        return (
            f"stranded call {self.run_id}/{self.call_id}: {self.tool} {self.state.value} for "
            f"{self.age_ms // 1000} s, past the {self.limit_ms / 1000:g} s its workers may take "
            f"(`callgate view {self.run_id}`)"
        )


@dataclass(frozen=True, slots=True)
class Scan:
    """What one scan found, and how many live runs it read."""

    calls: list[StrandedCall]
    live_runs: int


def tool_timeouts(settings: Settings) -> TimeoutOf:
    """Each tool's ``timeout_s`` as the deployment's tool modules declare it; the deployment's
    ``tool_timeout_s`` for a tool they do not (an MCP server's), or if they do not import."""
    try:
        registry = load_registry(settings.tool_modules)
    except RegistryError:
        return lambda _name: settings.tool_timeout_s

    def timeout_of(name: str) -> float:
        tool = registry.get(name)
        return settings.tool_timeout_s if tool is None else tool.timeout_s

    return timeout_of


def limit_ms(
    call: CallRecord, turn_calls: Sequence[CallRecord], settings: Settings, timeout_of: TimeoutOf
) -> int:
    """How long the workers may leave ``call`` where it is (the module docstring says why)."""
    if call.state == C.REQUESTED:
        work_s = sum(timeout_of(c.tool) for c in turn_calls)
    elif call.state in RECONCILE:
        schedule = settings.reconcile_schedule_s
        work_s = sum(schedule) + len(schedule) * timeout_of(call.tool)
    else:
        work_s = timeout_of(call.tool)
    per_delivery_ms = work_s * 1000 + 2 * settings.claim_idle_ms
    return int(settings.max_deliveries * per_delivery_ms)


def _chained_behind(call: CallRecord, turn_calls: Sequence[CallRecord]) -> list[CallRecord]:
    """The earlier writes of its turn on its resource, which a chain runs before it."""
    if call.state not in RUNNABLE or call.effect not in WRITES:
        return []
    return [
        c
        for c in turn_calls
        if c.index < call.index and c.resource_key == call.resource_key and c.effect in WRITES
    ]


def _held(run: RunRecord, call: CallRecord, turn_calls: Sequence[CallRecord]) -> bool:
    """A write the batch's approvals hold until the last of them is decided."""
    if call.effect == Effect.READ or not any(c.state == C.NEEDS_APPROVAL for c in turn_calls):
        return False
    return call.state == C.APPROVED or (
        call.state == C.ALLOWED and run.batch_policy == "hold_effects"
    )


def owed_since(run: RunRecord, call: CallRecord, turn_calls: Sequence[CallRecord]) -> int | None:
    """Since when a worker owes ``call`` a move (ms); None if none does: it ended, it waits for
    a person, or for an earlier write of its chain.  A call waiting to be dispatched counts from
    its run's last move too (a held batch is released by the run's), and from its chain's."""
    if call.state in CALL_TERMINAL or call.state in PERSON or _held(run, call, turn_calls):
        return None
    before = _chained_behind(call, turn_calls)
    if any(c.state not in CALL_TERMINAL for c in before):
        return None
    if call.state not in RUNNABLE:
        return call.updated_ms
    return max([call.updated_ms, run.updated_ms, *(c.updated_ms for c in before)])


def stranded_in(
    run: RunRecord, calls: Sequence[CallRecord], now: int, settings: Settings, timeout_of: TimeoutOf
) -> list[StrandedCall]:
    """The calls of ``run`` (every turn's) past their limit at ``now`` (pure)."""
    if run.status in RUN_TERMINAL:
        return []
    found = []
    for call in calls:
        turn_calls = [c for c in calls if c.turn == call.turn]
        since = owed_since(run, call, turn_calls)
        if since is None:
            continue
        limit = limit_ms(call, turn_calls, settings, timeout_of)
        if now - since > limit:
            found.append(
                StrandedCall(call.run_id, call.call_id, call.tool, call.state, now - since, limit)
            )
    return found


async def _calls_of(reads: Reads, run_id: str) -> tuple[RunRecord | None, list[CallRecord]]:
    """The run as it is now and every call its index names (two round trips, shared)."""
    index = await reads.run_index(run_id)
    run, calls = await reads.run_and_calls(run_id, index.call_ids())
    return run, [c for c in calls if c is not None]


async def find_stranded(
    reads: Reads, timeout_of: TimeoutOf | None = None, now: int | None = None
) -> Scan:
    """Every stranded call of every live run (of ``reads.settings.tenant``'s, if set), oldest
    first."""
    settings = reads.settings
    timeout_of = timeout_of or tool_timeouts(settings)
    live = await find_runs(reads, settings.partitions, 0, LIVE, MAX_RUNS, settings.tenant)
    found: list[StrandedCall] = []
    for start in range(0, len(live), SCAN_PAGE):
        page = live[start : start + SCAN_PAGE]
        read = await asyncio.gather(*(_calls_of(reads, r.run_id) for r in page))
        moment = now_ms() if now is None else now
        for run, calls in read:
            if run is not None:
                found += stranded_in(run, calls, moment, settings, timeout_of)
    return Scan(sorted(found, key=lambda s: -s.age_ms), len(live))
