"""Turn a paused or finished run into a `Case` (`callgate cases export RUN_ID`).

Everything comes from the ledger through the client's reads: the run record, its calls, the raw
response of every turn, and the event log (each call's path, the states the run settled in, the
people's decisions).  Nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from callgate.client import CallgateClient, settled
from callgate.errors import CallgateError, NotFoundError
from callgate.ops.cases.casefile import Case, CaseCall, CaseRun, CaseTurn, Expected, PersonAct
from callgate.ops.cases.redaction import CaseRedactor
from callgate.ops.conformance.drive import observed_calls
from callgate.records import Event, RunRecord
from callgate.states import RUN_PAUSED, RUN_TERMINAL
from callgate.tools.registry import ToolRegistry

SETTLED = frozenset({*RUN_PAUSED, *RUN_TERMINAL})
_DECIDED = {"approval.approved": "approve", "approval.denied": "deny"}


class NotSettledError(CallgateError):
    """The run is still moving: a case is a run that paused or ended."""


def callgate_version() -> str:
    try:
        return version("callgate")
    except PackageNotFoundError:
        return "unknown"


async def export_case(
    client: CallgateClient, run_id: str, registry: ToolRegistry, name: str | None = None
) -> Case:
    """The run ``run_id`` as a redacted case named ``name`` (default: the run id)."""
    run = await client.run(run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id}")
    if not settled(run.status):
        raise NotSettledError(
            f"run {run_id} is {run.status.value}: export it once it is paused or has ended"
        )
    view = await client.view(run_id)
    events = await client.events(run_id)
    raw = await client.ledger.raw_responses(run_id)
    sensitive = {
        field
        for tool in run.allowed_tools
        if (found := registry.get(tool)) is not None
        for field in found.sensitive_fields
    }
    redactor = CaseRedactor(sensitive, view["calls"], run.identity)
    return Case(
        name=name or run_id,
        source_run=run_id,
        exported_ms=int(time.time() * 1000),
        callgate_version=callgate_version(),
        api=run.api,
        model=run.model,
        run=_submitted(run, redactor),
        turns=_turns(raw, events, redactor),
        calls=_calls(view["calls"], events, redactor),
        people=_people(events),
        expected=Expected(
            states=settled_states(events),
            status=run.status.value,
            final_text=redactor(run.final_text),
        ),
    )


def _submitted(run: RunRecord, redactor: CaseRedactor) -> CaseRun:
    return CaseRun(
        input=redactor(run.input),
        instructions=redactor(run.instructions),
        identity=redactor(run.identity),
        allowed_tools=list(run.allowed_tools),
        max_turns=run.max_turns,
        max_total_tokens=run.max_total_tokens,
        batch_policy=run.batch_policy,
        acceptance=run.acceptance,
    )


def _turns(
    raw: dict[int, dict[str, Any]], events: Sequence[Event], redactor: CaseRedactor
) -> list[CaseTurn]:
    outcomes = {
        int(e.data.get("turn", 0)): str(e.data.get("outcome"))
        for e in events
        if e.type == "model.response"
    }
    return [
        CaseTurn(
            turn=turn,
            provider=str(kept.get("provider")),
            api=kept["api"],
            sdk_version=str(kept.get("sdk_version")),
            api_version=kept.get("api_version"),
            response_id=kept.get("response_id"),
            outcome=outcomes.get(turn),
            response=redactor(kept.get("raw_output") or {}),
        )
        for turn, kept in sorted(raw.items())
    ]


def _calls(
    calls: list[dict[str, Any]], events: Sequence[Event], redactor: CaseRedactor
) -> list[CaseCall]:
    seen = observed_calls(calls, list(events))
    return [
        CaseCall(
            call_id=call["call_id"],
            turn=call["turn"],
            index=call["index"],
            provider_call_id=call["provider_call_id"],
            tool=call["tool"],
            effect=call["effect"],
            arguments=redactor(call["arguments"]),
            decision=call["decision"],
            state=call["state"],
            path=list(observed.path),
            reason=redactor(call["reason"]),
            result=redactor(call["result"]),
        )
        for call, observed in zip(calls, seen, strict=True)
    ]


def _people(events: Sequence[Event]) -> list[PersonAct]:
    acts = []
    for event in events:
        call_id = str(event.data.get("call_id", ""))
        if event.type in _DECIDED:
            by = str(event.data.get("approver"))
            acts.append(PersonAct(act=_DECIDED[event.type], call_id=call_id, by=by))
        elif event.type == "call.resolved":
            by, outcome = str(event.data.get("person")), event.data.get("outcome")
            acts.append(PersonAct(act="resolve", call_id=call_id, by=by, outcome=outcome))
    return acts


def settled_states(events: Sequence[Event]) -> list[str]:
    """Each state the run settled in (paused or ended), in order, by its event log."""
    return [
        str(e.data["to"])
        for e in events
        if e.type == "run.transition" and e.data.get("to") in SETTLED
    ]
