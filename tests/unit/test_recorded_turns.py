"""A recorded response is read back as what it said, in each protocol: what the scripted model
renders (`render_json`, the body the SDKs parse and the ledger keeps) reads back by
`recorded_turn` as the same text, calls, call ids, refusal and stop — so `callgate cases run`
says again exactly what a run was told, whichever protocol it replays on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from callgate.standins.scripted import wire_anthropic, wire_chat, wire_responses
from callgate.standins.scripted.common import CallSpec, Turn
from callgate.standins.scripted.recorded import READERS, recorded_turn
from callgate.standins.scripted.scenario import Recorded

RENDER: dict[str, Callable[[Turn, dict[str, Any]], dict[str, Any]]] = {
    "openai-responses": wire_responses.render_json,
    "openai-chat": wire_chat.render_json,
    "anthropic-messages": wire_anthropic.render_json,
}
BODY = {"model": "m", "messages": [], "input": [], "max_tokens": 64}
TWO_CALLS = (
    CallSpec("check_seats", '{"event_id":"ws-200"}', call_id="call_a1"),
    CallSpec("reserve_seat", '{"event_id":"ws-200","participant_id":"p-alice"}', call_id="c_b2"),
)
TURNS = {
    "final answer": Turn(text="All booked.", stop="end"),
    "two calls with their ids": Turn(text="", calls=TWO_CALLS, stop="tool_calls"),
    "a refusal": Turn(refusal="I can't help with that.", stop="refusal"),
}


@pytest.mark.parametrize("api", sorted(RENDER))
@pytest.mark.parametrize("name", sorted(TURNS))
def test_a_rendered_response_reads_back_as_the_turn_it_said(api: str, name: str) -> None:
    said = TURNS[name]
    kept = RENDER[api](said, BODY)

    read = recorded_turn(Recorded(api=api, response=kept), model=None)

    assert (read.text, read.refusal, read.stop) == (said.text, said.refusal, said.stop)
    assert [(c.name, c.call_id) for c in read.calls] == [(c.name, c.call_id) for c in said.calls]
    assert [orjson.loads(c.arguments) for c in read.calls] == [
        orjson.loads(c.arguments) for c in said.calls
    ]


def test_a_cut_call_reads_back_as_cut() -> None:
    cut = Turn(
        calls=(CallSpec("reserve_seat", '{"event_id":"ws-2', False, "call_c"),), stop="max_tokens"
    )
    for api in ("openai-responses", "openai-chat"):
        read = READERS[api](RENDER[api](cut, BODY))
        assert read.stop == "max_tokens" and not read.calls[0].complete, api
