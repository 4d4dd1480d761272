"""The explorer's model: the OpenAI Responses adapter with its wire cut off.

Each turn's answer is the schedule's choice among `ANSWERS`, handed to model_turn as the
adapter's neutral event (`callgate.providers.base`) with the Responses items the history keeps;
the wire itself is what conformance covers.  Every request is remembered as the model
received it, so the invariants can check which result came back under which call id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from callgate.providers.base import (
    FinalAnswer,
    Incomplete,
    Refused,
    RequestFailed,
    ToolCallRequest,
    ToolRequests,
    TurnEvent,
    TurnInput,
    TurnOutcome,
)
from callgate.providers.common import RecordMeta
from callgate.providers.openai_responses import OpenAIResponsesAdapter
from callgate.standins.scripted.history import from_responses

Call = tuple[str, dict[str, Any]]
PLANS: dict[str, tuple[Call, ...]] = {
    "reads": (("look", {"item": "a"}), ("look", {"item": "b"})),
    "writes_one_resource": (("reserve", {"item": "a"}), ("reserve", {"item": "a"})),
    "approval": (("transfer", {"item": "a"}),),
    "read_and_approval": (("look", {"item": "a"}), ("transfer", {"item": "b"})),
    "idempotent": (("hold", {"item": "a"}),),
    "bad_arguments": (("reserve", {"item": "a", "qty": 2}),),
}
"""The tool calls an answer may carry."""
ANSWERS: tuple[str, ...] = (
    "final",
    *PLANS,
    "reused_id",
    "truncated",
    "refused",
    "transport_error",
    "bad_request",
)
"""Every answer the model may give; the first is the one a fault-free schedule gets."""

ANSWER_WEIGHTS: tuple[float, ...] = (2.0, *(1.5 for _ in PLANS), 0.3, 0.3, 0.3, 0.3, 0.3)
"""How often each answer is given while exploring: mostly tool calls, so runs go on."""
Choose = Callable[[str, Sequence[str], Sequence[float] | None], str]


class ScriptedAnswers(OpenAIResponsesAdapter):
    """Answers each turn as ``choose`` says; ``received`` keeps every request per run."""

    def __init__(self, choose: Choose) -> None:
        super().__init__(stream=False)
        self.choose = choose
        self.received: list[dict[str, Any]] = []
        """Each request as the scripted server's log keeps one: ``{"path", "body"}``."""

    def _record_meta(self) -> RecordMeta:
        return RecordMeta("openai", self.api, "explorer", None)

    async def complete(self, turn: TurnInput) -> TurnOutcome:
        self.received.append({"path": "/v1/responses", "body": {"input": turn.history}})
        answer = self.choose("model", ANSWERS, ANSWER_WEIGHTS)
        asked = from_responses({"input": turn.history}).last_user_text
        event, items = _answer(answer, len(turn.history), asked)
        raw = {"id": f"resp_{len(self.received)}", "output": items}
        return self._outcome(event, raw, items)


def _answer(answer: str, seen: int, asked: str) -> tuple[TurnEvent, list[dict[str, Any]]]:
    """The neutral event of ``answer`` and the items the history keeps for it (a final answer
    echoes the user's latest words, as chaos's scenarios do, so a follow-up is seen answered)."""
    if answer in PLANS:
        return _calls(PLANS[answer], f"fc{seen}")
    if answer == "reused_id":
        return _calls(PLANS["reads"][:1], "fc1")
    if answer == "final":
        text = f"done: {asked}"
        return FinalAnswer(text), [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }
        ]
    if answer == "refused":
        return Refused("I will not do that"), []
    if answer == "truncated":
        return Incomplete("max_tokens"), []
    if answer == "transport_error":
        return RequestFailed("transport_error", "connection reset", retryable=True), []
    return RequestFailed("bad_request", "the request was refused", status=400), []


def _calls(plan: Sequence[Call], prefix: str) -> tuple[TurnEvent, list[dict[str, Any]]]:
    requests, items = [], []
    for index, (name, arguments) in enumerate(plan):
        raw = orjson.dumps(arguments).decode()
        item = {
            "type": "function_call",
            "call_id": f"{prefix}_{index}",
            "name": name,
            "arguments": raw,
        }
        requests.append(ToolCallRequest(f"{prefix}_{index}", name, arguments, raw, item))
        items.append(item)
    return ToolRequests(tuple(requests)), items
