"""A case file: one recorded run, redacted, as a regression case (`callgate cases export`).

What it holds is what the ledger kept: the provider, API and SDK of every turn with its raw
response, each call as the validator decided it and as it ended (its path through the states),
the people's decisions, and what the run came to.  It is plain JSON a person can read, edit
(a changed argument is a what-if) and commit: everything in it went through the trace's
redaction (`callgate.ops.cases.redaction`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from callgate.decisions.claims import ResolveOutcome
from callgate.records import Api, BatchPolicy

FORMAT = "callgate-case/1"
"""The case file's own schema version; a reader refuses one it does not know."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseTurn(_Strict):
    """One model turn as the ledger kept it."""

    turn: int = Field(ge=1)
    provider: str
    api: Api
    sdk_version: str
    api_version: str | None = None
    response_id: str | None = None
    outcome: str | None = None
    """How callgate classified it (tool_requests, final_answer, refusal, …)."""
    response: dict[str, Any]
    """The raw response, in its own protocol, redacted."""


class CaseCall(_Strict):
    """One call: what the model asked, what was decided, how it ended."""

    call_id: str
    turn: int
    index: int
    provider_call_id: str
    tool: str
    effect: str | None = None
    arguments: dict[str, Any] | None = None
    decision: str | None = None
    state: str
    path: list[str]
    """Every state it passed through, from ``requested`` on."""
    reason: str | None = None
    result: dict[str, Any] | None = None


class PersonAct(_Strict):
    """A person's signed decision the run took: replayed as the same person where the
    replaying deployment knows them."""

    act: Literal["approve", "deny", "resolve"]
    call_id: str
    by: str
    outcome: ResolveOutcome | None = None
    """``resolve``: what the person said happened."""


class CaseRun(_Strict):
    """What was submitted (the identity as it was verified then)."""

    input: str
    instructions: str | None = None
    identity: dict[str, Any] = Field(default_factory=dict)
    allowed_tools: list[str]
    max_turns: int = Field(ge=1)
    max_total_tokens: int | None = None
    batch_policy: BatchPolicy = "hold_effects"
    acceptance: dict[str, Any] | None = None


class Expected(_Strict):
    """What the run came to."""

    states: list[str]
    """Each state it settled in (a pause, then the end), in order."""
    status: str
    final_text: str | None = None


class Case(_Strict):
    """One recorded run as a regression case."""

    format: Literal["callgate-case/1"] = "callgate-case/1"
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    source_run: str
    exported_ms: int
    callgate_version: str
    api: Api
    model: str
    run: CaseRun
    turns: list[CaseTurn]
    calls: list[CaseCall]
    people: list[PersonAct] = Field(default_factory=list)
    expected: Expected


class CaseFileError(ValueError):
    """A case file that cannot be read: the message names the file and what to fix."""


def load_case(path: Path) -> Case:
    try:
        return Case.model_validate(orjson.loads(path.read_bytes()))
    except OSError as exc:
        raise CaseFileError(f"{path}: cannot read it ({exc.strerror})") from exc
    except orjson.JSONDecodeError as exc:
        raise CaseFileError(f"{path}: not JSON ({exc})") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CaseFileError(f"{path}: not a case file: {where}: {first['msg']}") from exc


def load_cases(where: Path) -> list[Case]:
    """Every ``*.json`` case in ``where`` (a folder) or ``where`` itself (one file), by name."""
    if where.is_dir():
        paths = sorted(where.glob("*.json"))
        if not paths:
            raise CaseFileError(f"{where}: no *.json case files in it")
    elif where.is_file():
        paths = [where]
    else:
        raise CaseFileError(f"{where}: no such file or folder")
    return [load_case(p) for p in paths]


def save_case(case: Case, folder: Path) -> Path:
    """Write ``case`` as ``<folder>/<name>.json`` (indented, keys in order: diffs read well)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.name}.json"
    data = case.model_dump(mode="json")
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return path
