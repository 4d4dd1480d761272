"""What a recorded case expects of its replay, in the terms the conformance checker reads.

`callgate conformance` and `callgate cases run` share one checker
(`callgate.ops.conformance.checker.check`): a recorded case becomes a catalogue `Case` whose
expectations are what the recording shows — the states the run settled in, each call's
decision, path and outcome in provider order, executions per tool and effects.  Pure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from callgate.ops.cases.casefile import Case, CaseCall
from callgate.ops.conformance import catalogue


def executed(call: CaseCall) -> bool:
    return "executing" in call.path


def expectation(case: Case, scenario: str) -> catalogue.Case:
    """The catalogue case the replay of ``case`` (as model ``scenario``) is checked against."""
    runs = Counter(call.tool for call in case.calls if executed(call))
    return catalogue.Case(
        id=case.name,
        title=f"recorded run {case.source_run}",
        scenario=scenario,
        tools="",
        input=case.run.input,
        states=tuple(case.expected.states),
        executions=dict(runs),
        calls=tuple(_call(call) for call in case.calls),
        effects=sum(1 for c in case.calls if executed(c) and c.effect not in (None, "read")),
        identity=case.run.identity,
    )


def _call(call: CaseCall) -> catalogue.CallExpectation:
    return catalogue.CallExpectation(
        tool=call.tool,
        state=call.state,
        code=_code(call.result),
        path=tuple(call.path),
        decision=call.decision,
    )


def _code(result: dict[str, Any] | None) -> str | None:
    if result is None or result.get("status") == "ok":
        return None
    error = result.get("error")
    return str(error.get("code")) if isinstance(error, dict) else None


def recording(case: Case) -> dict[str, dict[str, Any]]:
    """Call id → how it ended: what the replay's tools answer with (`replay_tools`)."""
    return {
        call.call_id: {
            "tool": call.tool,
            "state": call.state,
            "path": call.path,
            "result": call.result,
        }
        for call in case.calls
    }


def scenario(case: Case) -> dict[str, Any]:
    """The scripted model's scenario that says each recorded turn again, in turn order."""
    return {
        "description": f"recorded run {case.source_run} ({case.api}, {case.model})",
        "model": case.model,
        "steps": [
            {
                "name": f"turn {turn.turn}",
                "when": {"assistant_turns": n},
                "recorded": {"api": turn.api, "response": turn.response},
            }
            for n, turn in enumerate(case.turns)
        ],
    }
