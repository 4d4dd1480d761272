"""The matrix as text (case rows × protocol columns, then every difference) and as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from callgate.ops.conformance.catalogue import Case
from callgate.ops.conformance.checker import Cell

PASS, FAIL = "✓", "✗"


def exit_code(cells: Sequence[Cell]) -> int:
    """0 when every cell passed (and there was at least one), else 1."""
    return 0 if cells and all(c.passed for c in cells) else 1


def to_json(cells: Sequence[Cell]) -> dict[str, Any]:
    return {"cells": [cell.to_json() for cell in cells]}


def _mark(cell: Cell | None) -> str:
    if cell is None:
        return "-"
    return PASS if cell.passed else FAIL


def render(
    cases: Sequence[Case],
    apis: Sequence[str],
    cells: Sequence[Cell],
    elapsed_s: float | None = None,
) -> str:
    """The matrix, a summary line, and each failing cell with its differences."""
    by_key = {(c.case, c.api): c for c in cells}
    width = max([len(case.title) for case in cases] + [len("case")])
    lines = ["  ".join(["case".ljust(width), *apis])]
    for case in cases:
        marks = [_mark(by_key.get((case.id, api))).ljust(len(api)) for api in apis]
        lines.append("  ".join([case.title.ljust(width), *marks]).rstrip())
    passed = sum(c.passed for c in cells)
    took = "" if elapsed_s is None else f" in {elapsed_s:.0f}s"
    lines += ["", f"{passed}/{len(cells)} cells passed{took}"]
    failing = [c for c in cells if not c.passed]
    if failing:
        lines += ["", "failures:"]
        for cell in failing:
            lines.append(
                f"  {FAIL} {cell.case} × {cell.api}: expected {cell.expected_state}, "
                f"got {cell.actual_state}"
            )
            lines += [f"      - {problem}" for problem in cell.problems]
    return "\n".join(lines)
