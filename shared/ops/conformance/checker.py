"""Compare what a cell showed with what its case expects: a pure function, no I/O.

Every kind of check says in its own words what differed, so a failing cell reads as the
difference itself ("executions of reserve_seat: expected 1, the service counted 2").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from callgate.ops.conformance.catalogue import CallExpectation, Case
from callgate.ops.conformance.observation import Observation, ObservedCall
from callgate.ops.conformance.pairing import pairing_problems, result_pairs, told

ARROW = " → "


class Counted(NamedTuple):
    """Who counted executions and effects, as a difference names them."""

    executions: str = "the service counted"
    effects: str = "external effects: expected {0} reservation(s), the booking service made {1}"


SERVICES = Counted()
"""Conformance: the demo services count (their own request counters)."""


@dataclass(frozen=True)
class Cell:
    """The verdict on one case × protocol."""

    case: str
    api: str
    passed: bool
    expected_state: str
    actual_state: str
    executions: Mapping[str, int]
    pairing_ok: bool
    external_effect: bool
    problems: tuple[str, ...] = ()

    @property
    def detail(self) -> str:
        return "; ".join(self.problems)

    def to_json(self) -> dict[str, Any]:
        """Exactly the fields ``callgate conformance --json`` promises."""
        return {
            "case": self.case,
            "api": self.api,
            "passed": self.passed,
            "expected_state": self.expected_state,
            "actual_state": self.actual_state,
            "executions": dict(self.executions),
            "pairing_ok": self.pairing_ok,
            "external_effect": self.external_effect,
            "detail": self.detail,
        }


def check(case: Case, api: str, seen: Observation, counter: Counted = SERVICES) -> Cell:
    """The cell for ``case`` on ``api`` given what was seen (counted as ``counter`` says)."""
    pairing = _pairing(api, seen)
    problems = [
        *([f"runner: {seen.error}"] if seen.error else []),
        *_states(case, seen),
        *_executions(case.executions, seen.executions, counter),
        *_before_approval(seen),
        *_effects(case, seen, counter),
        *_calls(case.calls, seen.calls),
        *(f"pairing: {p}" for p in pairing),
        *_finish_order(case, seen),
        *_crash(case, seen),
        *_then(case, seen),
    ]
    counted = {
        tool: seen.executions.get(tool, 0)
        for tool in sorted(set(case.executions) | {t for t, n in seen.executions.items() if n})
    }
    return Cell(
        case=case.id,
        api=api,
        passed=not problems,
        expected_state=ARROW.join(case.states),
        actual_state=ARROW.join(seen.states) or "(none)",
        executions=counted,
        pairing_ok=not pairing,
        external_effect=seen.effects > 0,
        problems=tuple(problems),
    )


def _states(case: Case, seen: Observation) -> list[str]:
    if tuple(seen.states) == case.states:
        return []
    why = f" ({seen.reason})" if seen.reason else ""
    got = ARROW.join(seen.states) or "nothing"
    return [f"state: expected {ARROW.join(case.states)}, got {got}{why}"]


def _executions(
    expected: Mapping[str, int], counted: Mapping[str, int], counter: Counted
) -> list[str]:
    return [
        f"executions of {tool}: expected {expected.get(tool, 0)}, "
        f"{counter.executions} {counted.get(tool, 0)}"
        for tool in sorted(set(expected) | set(counted))
        if expected.get(tool, 0) != counted.get(tool, 0)
    ]


def _before_approval(seen: Observation) -> list[str]:
    early = {t: n for t, n in (seen.executions_at_pause or {}).items() if n}
    return [f"{tool} executed {n}× before it was approved" for tool, n in sorted(early.items())]


def _effects(case: Case, seen: Observation, counter: Counted) -> list[str]:
    if seen.effects == case.effects:
        return []
    return [counter.effects.format(case.effects, seen.effects)]


def _calls(expected: tuple[CallExpectation, ...], seen: tuple[ObservedCall, ...]) -> list[str]:
    if [c.tool for c in seen] != [e.tool for e in expected]:
        tools = ", ".join(e.tool for e in expected)
        got = ", ".join(c.tool for c in seen)
        return [f"calls: expected [{tools}], the run has [{got}]"]
    problems: list[str] = []
    for n, (want, call) in enumerate(zip(expected, seen, strict=True), start=1):
        where = f"call {n} ({call.tool})"
        if want.decision and call.decision != want.decision:
            problems.append(_changed_decision(where, want.decision, call))
        if call.state != want.state or call.code != want.code:
            problems.append(
                f"{where}: expected {_outcome(want.state, want.code)}, "
                f"got {_outcome(call.state, call.code)}"
            )
        if want.path and call.path != want.path:
            problems.append(
                f"{where}: expected the path {ARROW.join(want.path)}, got {ARROW.join(call.path)}"
            )
        if want.reason and not any(want.reason in r for r in call.reasons):
            problems.append(f"{where}: no transition gives the reason {want.reason!r}")
    return problems


def _changed_decision(where: str, decided: str, call: ObservedCall) -> str:
    """The validator now decides ``call`` otherwise than it did: say what, and why now."""
    why = call.code or next(iter(call.reasons), "")
    now = f"{call.decision or 'undecided'}" + (f" ({why})" if why else "")
    return f"{where} [{call.provider_call_id}]: the decision changed: {decided}, now {now}"


def _outcome(state: str, code: str | None) -> str:
    return f"{state} ({code})" if code else state


def _pairing(api: str, seen: Observation) -> list[str]:
    """Every call of an earlier turn must have its own result under its own call id."""
    if seen.last_request is None:
        return ["the model server logged no request for this run"]
    due = [call for call in seen.calls if call.turn < seen.turns]
    try:
        sent = result_pairs(api, seen.last_request)
    except (KeyError, TypeError) as exc:
        return [f"the request body is not {api}: {type(exc).__name__} {exc}"]
    return pairing_problems(due, sent)


def _finish_order(case: Case, seen: Observation) -> list[str]:
    if not case.finish_order or tuple(seen.finish_order) == case.finish_order:
        return []
    got = " then ".join(seen.finish_order) or "nothing"
    return [f"finish order: expected {' then '.join(case.finish_order)}, got {got}"]


def _crash(case: Case, seen: Observation) -> list[str]:
    if case.crash is None or seen.crash is not None:
        return []
    return [f"no {case.crash} was killed: the case did not exercise recovery"]


def _then(case: Case, seen: Observation) -> list[str]:
    """The person's action was taken, and did what it says: after a cancel the model hears
    nothing more; an applied resolution is what the model is told, word for word."""
    then = case.then
    if then is None:
        return []
    if seen.acted is None:
        return [f"{then.by} never got to {then.act} (at {then.when}): the case did not exercise it"]
    problems: list[str] = []
    late = seen.model_requests - (seen.model_requests_at_action or 0)
    if then.act == "cancel" and late > 0:
        problems.append(f"the model received {late} request(s) after the run was cancelled")
    if then.act == "resolve" and then.outcome == "applied" and then.result is not None:
        want = orjson.dumps(dict(then.result), option=orjson.OPT_SORT_KEYS).decode()
        for n, call in enumerate(seen.calls, start=1):
            got = orjson.dumps(told(call.result), option=orjson.OPT_SORT_KEYS).decode()
            if "unresolved" in call.path and got != want:
                problems.append(
                    f"call {n} ({call.tool}): its result is {got}, "
                    f"not the {want} {then.by} confirmed"
                )
    return problems
