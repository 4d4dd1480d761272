"""Scenario scripts: what the scripted model says, as data, selected by the conversation so far.

A scenario is `<name>.json` in a scenarios directory; a request picks it with `model: <name>`.

    {
      "description": "two parallel calls, then an answer citing both results",
      "model": "gpt-4o-2024-08-06",            # optional: model name reported back
      "steps": [
        {"name": "ask",
         "text": "Checking both.",              # optional text
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_time", "arguments": {"city": "Paris"}}]},
        {"name": "answer",
         "when": {"results_for": ["get_weather", "get_time"]},
         "text": "Weather: {result:get_weather}. Time: {result:get_time}."}
      ]
    }

Selection: the *first* step whose `when` matches answers. `when` keys (all must hold):
`assistant_turns` (exact number of assistant turns already in the history), `results_for`
(tool names that each have a result in the history), `user_contains` (substring of the latest
user text). A step without `when` matches when `assistant_turns` equals its index. No match is a
400 in the API's own envelope whose message says so.

A step says what a `recorded` response said (`{"api": …, "response": <the body the ledger
kept>}`, rendered in the protocol asked for, its call ids kept: `callgate cases run`), or
`text`, `tool_calls` (name + arguments *object*; `repeat: N` emits that call N
times, each with its own id — a flood) and/or `refusal`. In `text` and in
string argument values, `{result:NAME}` is replaced by the content of the latest result of a
call to NAME in the history, `{result:NAME#2}` by the second one, `{user}` by the latest user
text.

`fault` (one object or a list) changes what this step serves on chosen attempts of it.
`times: K` means attempts 1..K, `attempts: [2, 3]` names them, `probability: P` (with `seed: S`)
hits each attempt independently with chance P, reproducibly (a chaos run's model drops); none of
them means every attempt. The attempt counter is per process and per (scenario, step);
`POST /_reset` clears it. Types:

* transport/HTTP: `drop` (close the connection after `after_events` SSE events; non-streaming:
  before any byte), `delay` (`first_byte_s` before the first byte, `event_gap_s` between
  events), `http_429` (`retry_after_s`; `code: "insufficient_quota"` for the quota body),
  `http_500`, `overloaded` (Anthropic 529 `overloaded_error`; OpenAI 503 "overloaded"),
  `stream_error` (the API's mid-stream error event after `after_events` events; non-streaming:
  HTTP 500).
* content: `truncate` (max-token stop mid-arguments of the last call, or mid-text),
  `deep_arguments` (every call's arguments become one object nested 5,000 levels deep),
  `refusal` (`text`), `content_filter` (Anthropic has none: rendered as stop_reason refusal
  after the partial text), `invalid_json_arguments`, `duplicate_call_ids`, `missing_call_id`,
  `reuse_call_id` (every call carries the id of the latest tool result already in the history,
  i.e. a call id reused across turns), `interleave_arguments` (fragments of parallel calls
  alternate), `char_fragments` (arguments streamed one character per delta).
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from callgate.standins.scripted.common import CallSpec, IdMode, Stop, Turn
from callgate.standins.scripted.history import Conversation

FaultType = Literal[
    "drop",
    "delay",
    "http_429",
    "http_500",
    "overloaded",
    "stream_error",
    "truncate",
    "refusal",
    "content_filter",
    "invalid_json_arguments",
    "deep_arguments",
    "duplicate_call_ids",
    "missing_call_id",
    "reuse_call_id",
    "interleave_arguments",
    "char_fragments",
]
DEEP_LEVELS = 5000
DEFAULT_REFUSAL = "I'm sorry, I can't assist with that request."
_PLACEHOLDER = re.compile(r"\{result:([A-Za-z0-9_.\-]+)(?:#(\d+))?\}|\{user\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fault(_Strict):
    type: FaultType
    times: int | None = None
    attempts: list[int] | None = None
    probability: float | None = Field(default=None, ge=0, le=1)
    seed: int = 0
    after_events: int = 2
    retry_after_s: float = 1.0
    first_byte_s: float = 0.0
    event_gap_s: float = 0.0
    text: str | None = None
    code: str | None = None

    def applies(self, attempt: int) -> bool:
        if self.probability is not None:
            # Seeded by (seed, attempt), not by a shared generator: the same attempt number
            # gets the same answer however requests interleave.
            return random.Random(f"{self.seed}:{attempt}").random() < self.probability
        if self.attempts is not None:
            return attempt in self.attempts
        return self.times is None or attempt <= self.times


class When(_Strict):
    assistant_turns: int | None = None
    results_for: list[str] = Field(default_factory=list)
    user_contains: str | None = None


class ToolCallSpec(_Strict):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    repeat: int = Field(default=1, ge=1, le=100_000)


class Recorded(_Strict):
    """A response the ledger kept (`callgate cases`), in the protocol it was recorded in."""

    api: Literal["openai-responses", "openai-chat", "anthropic-messages"]
    response: dict[str, Any]


class Step(_Strict):
    name: str | None = None
    when: When | None = None
    text: str = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    refusal: str | None = None
    fault: Fault | list[Fault] | None = None
    recorded: Recorded | None = None
    """Say what this recorded response said, rendered in whichever protocol is asked."""

    def faults(self) -> list[Fault]:
        if self.fault is None:
            return []
        return self.fault if isinstance(self.fault, list) else [self.fault]


class Scenario(_Strict):
    description: str = ""
    model: str | None = None
    steps: list[Step]


class ScenarioError(Exception):
    """A scenario file exists but does not parse; the message says where."""


def load_scenario(name: str, dirs: Sequence[Path]) -> Scenario | None:
    """The scenario `<name>.json` from the first directory holding it, or None."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name) or name.startswith("."):
        return None
    for d in dirs:
        path = d / f"{name}.json"
        if path.is_file():
            try:
                return Scenario.model_validate(orjson.loads(path.read_bytes()))
            except (orjson.JSONDecodeError, ValidationError) as exc:
                raise ScenarioError(f"scenario {name!r} ({path}) is invalid: {exc}") from exc
    return None


def matches(step: Step, index: int, conv: Conversation) -> bool:
    when = step.when or When(assistant_turns=index)
    if when.assistant_turns is not None and when.assistant_turns != conv.assistant_turns:
        return False
    if any(not conv.results_named(n) for n in when.results_for):
        return False
    return when.user_contains is None or when.user_contains in conv.last_user_text


def select_step(scenario: Scenario, conv: Conversation) -> int | None:
    return next((i for i, s in enumerate(scenario.steps) if matches(s, i, conv)), None)


class AttemptCounter:
    """Per-process attempt numbers per (scenario, step), so a fault can hit only attempt 1."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}

    def next(self, scenario: str, step: int) -> int:
        n = self._counts.get((scenario, step), 0) + 1
        self._counts[(scenario, step)] = n
        return n

    def reset(self) -> None:
        self._counts.clear()


def substitute(text: str, conv: Conversation) -> str:
    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "{user}":
            return conv.last_user_text
        found = conv.results_named(m.group(1))
        k = int(m.group(2)) if m.group(2) else len(found)
        return found[k - 1].content if 0 < k <= len(found) else f"<no result for {m.group(1)}>"

    return _PLACEHOLDER.sub(repl, text)


def _subst_value(value: Any, conv: Conversation) -> Any:
    if isinstance(value, str):
        return substitute(value, conv)
    if isinstance(value, list):
        return [_subst_value(v, conv) for v in value]
    if isinstance(value, dict):
        return {k: _subst_value(v, conv) for k, v in value.items()}
    return value


def _id_mode(kinds: Collection[str], conv: Conversation) -> tuple[IdMode, str | None]:
    """How this turn's call ids are rendered, and the earlier id a ``reuse`` repeats."""
    if "missing_call_id" in kinds:
        return "missing", None
    if "duplicate_call_ids" in kinds:
        return "duplicate", None
    if "reuse_call_id" in kinds and conv.results:
        return "reuse", conv.results[-1].call_id
    return "normal", None


def build_turn(step: Step, conv: Conversation, faults: Sequence[Fault], model: str | None) -> Turn:
    """Fold a step's active content faults into the protocol-neutral `Turn` to render."""
    kinds = {f.type for f in faults}
    text = substitute(step.text, conv)
    calls = [
        CallSpec(c.name, orjson.dumps(_subst_value(c.arguments, conv)).decode())
        for c in step.tool_calls
        for _ in range(c.repeat)
    ]
    refusal = step.refusal
    stop: Stop = "tool_calls" if calls else "end"
    if "refusal" in kinds:
        given = next(f.text for f in faults if f.type == "refusal")
        refusal = given or step.refusal or DEFAULT_REFUSAL
    if "invalid_json_arguments" in kinds:
        calls = [CallSpec(c.name, c.arguments[:-1] + ",}") for c in calls]
    if "deep_arguments" in kinds:
        deep = '{"a":' * DEEP_LEVELS + "1" + "}" * DEEP_LEVELS
        calls = [CallSpec(c.name, deep) for c in calls]
    if refusal is not None:
        text, calls, stop = "", [], "refusal"
    elif "content_filter" in kinds:
        text, calls, stop = text[: len(text) // 2], [], "content_filter"
    elif "truncate" in kinds:
        stop = "max_tokens"
        if calls:
            last = calls[-1]
            cut = max(1, len(last.arguments) // 2)
            calls[-1] = CallSpec(last.name, last.arguments[:cut], complete=False)
        else:
            text = text[: max(1, len(text) // 2)]
    id_mode, reused_id = _id_mode(kinds, conv)
    return Turn(
        text=text,
        refusal=refusal,
        calls=tuple(calls),
        stop=stop,
        char_fragments="char_fragments" in kinds,
        interleave="interleave_arguments" in kinds,
        id_mode=id_mode,
        reused_id=reused_id,
        model=model,
    )
