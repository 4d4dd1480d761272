"""A recorded response, in the protocol it was recorded in, as the `Turn` it said.

`callgate cases run` replays a run's recorded turns through this server: each turn's body is
read by its own protocol's reader, and the `Turn` is then rendered in whichever protocol the
replay asks for (``--api``), with the recorded call ids, so results still pair by call id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from callgate.standins.scripted import wire_anthropic, wire_chat, wire_responses
from callgate.standins.scripted.common import Turn
from callgate.standins.scripted.scenario import Recorded

READERS: dict[str, Callable[[dict[str, Any]], Turn]] = {
    "openai-responses": wire_responses.recorded_turn,
    "openai-chat": wire_chat.recorded_turn,
    "anthropic-messages": wire_anthropic.recorded_turn,
}


def recorded_turn(recorded: Recorded, model: str | None) -> Turn:
    """What ``recorded`` said, reporting ``model`` (None: the request's)."""
    turn = READERS[recorded.api](recorded.response)
    return Turn(text=turn.text, refusal=turn.refusal, calls=turn.calls, stop=turn.stop, model=model)
