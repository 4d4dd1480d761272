"""How a replay reads: one line a case, and under a case that differs, what differs."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from callgate.ops.cases.replay import Verdict


def render(verdicts: Sequence[Verdict], elapsed_s: float) -> str:
    """A line per case (✓ the same, ✗ differs) and each difference indented under its case."""
    lines = []
    for v in verdicts:
        mark = "✓" if v.cell.passed else "✗"
        first = v.case.turns[0] if v.case.turns else None
        recorded = f"{first.provider} {first.sdk_version}" if first else "no turn"
        lines.append(
            f"{mark} {v.case.name}: recorded {v.case.api} ({recorded}), replayed on "
            f"{v.cell.api} ({sdk_of(v.cell.api)}) as {v.run_id}; {v.writes} write(s) to the stub"
        )
        lines.extend(f"    - {problem}" for problem in v.cell.problems)
    differ = sum(not v.cell.passed for v in verdicts)
    lines.append(
        f"{len(verdicts)} case(s) in {elapsed_s:.1f}s: "
        + (f"{differ} differ" if differ else "every one replayed the same")
    )
    return "\n".join(lines)


def sdk_of(api: str) -> str:
    """The SDK a replay on ``api`` went through, as installed here: the upgrade it tests."""
    distribution = "anthropic" if api.startswith("anthropic") else "openai"
    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} not installed"


def to_json(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {
        "cases": [
            {
                "name": v.case.name,
                "source_run": v.case.source_run,
                "recorded_api": v.case.api,
                "api": v.cell.api,
                "run_id": v.run_id,
                "passed": v.cell.passed,
                "writes_to_stub": v.writes,
                "differences": list(v.cell.problems),
            }
            for v in verdicts
        ]
    }
