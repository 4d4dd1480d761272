"""Protocol-neutral pieces shared by the three wire renderers.

A scenario step is rendered into one `Turn` (what the model "says" on this attempt, after the
step's faults were applied); each `wire_*` module turns a `Turn` into its API's JSON body or SSE
event list. Nothing here knows a protocol's field names.
"""

from __future__ import annotations

import math
import random
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Stop = Literal["end", "tool_calls", "max_tokens", "content_filter", "refusal"]
"""Why the turn ended: each wire maps it to its own finish/stop reason or status."""

IdMode = Literal["normal", "duplicate", "missing", "reuse"]
"""How tool-call ids are rendered: fresh per call, one id shared by all calls, empty/absent, or
the id of a call from an earlier turn (`Turn.reused_id`)."""

_ALNUM = string.ascii_letters + string.digits
_WORD = re.compile(r"\s*\S+|\s+")


@dataclass(frozen=True)
class CallSpec:
    """One tool call as the model emits it: `arguments` is the JSON *text* on the wire."""

    name: str
    arguments: str
    complete: bool = True
    """False for the call cut by a max-token truncation (its arguments end mid-JSON)."""
    call_id: str | None = None
    """The id to send (a recorded response's own); None: the wire mints one."""


@dataclass(frozen=True)
class Turn:
    """What one response says, protocol-neutral; faults are already folded in."""

    text: str = ""
    refusal: str | None = None
    calls: tuple[CallSpec, ...] = ()
    stop: Stop = "end"
    char_fragments: bool = False
    """Split tool arguments into one-*character* fragments (never splits a UTF-8 sequence)."""
    interleave: bool = False
    """Interleave the argument fragments of parallel calls instead of one call after another."""
    id_mode: IdMode = "normal"
    reused_id: str | None = None
    """``id_mode == "reuse"``: the earlier call id every call of this turn carries again."""
    model: str | None = None
    """Model name to report; None echoes the request's `model`."""


@dataclass(frozen=True)
class ApiError:
    """An HTTP error in a provider's own shape: status, JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SSE:
    """One server-sent event; `event` None means a data-only frame (Chat Completions)."""

    event: str | None
    data: dict[str, Any] | str

    def encode(self) -> bytes:
        payload = self.data if isinstance(self.data, str) else orjson.dumps(self.data).decode()
        head = f"event: {self.event}\n" if self.event is not None else ""
        return f"{head}data: {payload}\n\n".encode()


_IDS = random.Random()
"""Response and call ids must be unique, not unpredictable: a seeded Mersenne Twister mints
them several times faster than urandom (several ids per response, on the model's time)."""


def rand_alnum(n: int) -> str:
    return "".join(_IDS.choices(_ALNUM, k=n))


def rand_hex(n: int) -> str:
    return f"{_IDS.getrandbits(4 * n):0{n}x}"


def now_s() -> int:
    return int(time.time())


def openai_request_id() -> str:
    return f"req_{rand_hex(32)}"


def anthropic_request_id() -> str:
    return f"req_011C{rand_alnum(20)}"


def call_ids(turn: Turn, fresh: Callable[[], str], missing: str | None = "") -> list[str | None]:
    """The tool-call ids of one response, per the turn's `id_mode`; ``fresh`` mints one id in
    the wire's own format, ``missing`` is what an absent id looks like on that wire."""
    if turn.id_mode == "missing":
        return [missing for _ in turn.calls]
    if turn.id_mode == "reuse" and turn.reused_id:
        return [turn.reused_id for _ in turn.calls]
    if turn.id_mode == "duplicate":
        shared = fresh()
        return [shared for _ in turn.calls]
    return [c.call_id or fresh() for c in turn.calls]


def text_fragments(text: str) -> list[str]:
    """Word-sized deltas, like the recorded streams (whitespace stays with the next word)."""
    return _WORD.findall(text) if text else []


def arg_fragments(arguments: str, *, one_char: bool) -> list[str]:
    """Argument deltas: 1 character each, or ~5 characters; always whole characters."""
    size = 1 if one_char else 5
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def interleave(frags: list[list[str]]) -> list[tuple[int, str]]:
    """Round-robin (call index, fragment) pairs over several calls' fragment lists."""
    out: list[tuple[int, str]] = []
    longest = max((len(f) for f in frags), default=0)
    for i in range(longest):
        for call, f in enumerate(frags):
            if i < len(f):
                out.append((call, f[i]))
    return out


def sequential(frags: list[list[str]]) -> list[tuple[int, str]]:
    return [(call, piece) for call, f in enumerate(frags) for piece in f]


def tokens(text: str) -> int:
    """A plausible token count (~4 characters a token) for usage numbers."""
    return max(1, math.ceil(len(text) / 4))


def input_tokens(body: dict[str, Any]) -> int:
    return tokens(orjson.dumps(body).decode())


def output_tokens(turn: Turn) -> int:
    parts = [turn.text, turn.refusal or ""] + [c.name + c.arguments for c in turn.calls]
    return tokens("".join(parts))
