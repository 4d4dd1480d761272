"""Where decided calls go next, appended to the same atomic step as the decisions.

Reads each get their own exec message (they run in parallel, on any executor); writes on one
resource go as one chain in provider order (deterministic); calls that will never run
(rejected, denied, expired) report their result at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from callgate.envelopes import CallResult, ExecRequest
from callgate.facts import ExecFacts
from callgate.ledger.base import LedgerBase
from callgate.ledger.tx import Tx
from callgate.states import CallState

RUNNABLE = frozenset({CallState.ALLOWED, CallState.APPROVED})
REPORT_NOW = frozenset({CallState.REJECTED, CallState.DENIED, CallState.EXPIRED})


@dataclass(frozen=True, slots=True)
class Decided:
    """One call as decided: its new state, and what orders it."""

    call_id: str
    index: int
    state: CallState
    is_write: bool
    resource_key: str | None
    facts: ExecFacts | None = None
    """The facts its executor runs it on, carried in its exec message (`callgate.facts`)."""


def dispatch(
    steps: LedgerBase,
    tx: Tx,
    run_id: str,
    turn: int,
    calls: Sequence[Decided],
    *,
    writes: bool = True,
) -> Tx:
    """Append the exec and result messages for ``calls`` (``writes=False`` holds writes)."""
    keys = steps.keys
    chains: dict[str, list[Decided]] = {}
    for call in sorted(calls, key=lambda c: c.index):
        if call.state in REPORT_NOW:
            steps.outbox(
                tx,
                keys.run_stream("results", run_id),
                CallResult(run_id=run_id, turn=turn, call_id=call.call_id, state=call.state.value),
            )
        elif call.state in RUNNABLE and not call.is_write:
            steps.outbox(
                tx,
                keys.run_stream("exec", run_id),
                ExecRequest(run_id=run_id, turn=turn, call_id=call.call_id, facts=call.facts),
            )
        elif call.state in RUNNABLE and writes:
            chains.setdefault(call.resource_key or "", []).append(call)
    for resource in sorted(chains):
        first, *rest = chains[resource]
        request = ExecRequest(
            run_id=run_id,
            turn=turn,
            call_id=first.call_id,
            chain=tuple(c.call_id for c in rest),
            facts=first.facts,
        )
        steps.outbox(tx, keys.run_stream("exec", run_id), request)
    return tx
