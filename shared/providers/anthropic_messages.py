"""Anthropic Messages (`POST /v1/messages`): `tool_use` blocks answered by `tool_result`
blocks (`tool_use_id`) in the next user message.

A stream is done only after `content_block_stop` for every block, a `message_delta`
with `stop_reason`, and `message_stop`.  A stream cut by max_tokens can leave a tool_use
block with partial JSON and no stop event; only the stop reason tells, so it is never a
ToolRequests.  An `event: error` inside the 200 stream arrives as APIStatusError(200).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from callgate.providers.adapter import SdkAdapter
from callgate.providers.base import (
    FailureKind,
    FinalAnswer,
    Incomplete,
    IncompleteReason,
    JsonDict,
    Refused,
    ToolRequests,
    ToolResultInput,
    TurnEvent,
    TurnInput,
)
from callgate.providers.common import (
    CallCandidate,
    RecordMeta,
    build_calls,
    drop_none,
    error_message,
    join_fragments,
    kind_for_status,
    make_error,
    map_connection_errors,
    parse_arguments,
    version_header,
)

if TYPE_CHECKING:
    import anthropic

PROVIDER = "anthropic"
API = "anthropic-messages"
DEFAULT_MAX_TOKENS = 1024
"""`max_tokens` is required by the API; used when the turn sets no limit."""

FINAL_STOPS = frozenset({"end_turn", "stop_sequence"})
INCOMPLETE_STOPS: dict[str, IncompleteReason] = {
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "other",  # a server-tool loop paused; we offer no server tools
}
ERROR_TYPES: dict[str, FailureKind] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
    "api_error": "server_error",
    "timeout_error": "timeout",
    "invalid_request_error": "bad_request",
    "authentication_error": "bad_request",
    "permission_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
    "billing_error": "bad_request",
}


def to_provider(turn: TurnInput, *, stream: bool) -> JsonDict:
    """The `messages.create` arguments."""
    request: JsonDict = {
        "model": turn.model,
        "messages": turn.history,
        "max_tokens": turn.max_output_tokens or DEFAULT_MAX_TOKENS,
        "stream": stream,
    }
    if turn.instructions is not None:
        request["system"] = turn.instructions
    if turn.tools:
        request["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in turn.tools
        ]
    return request


def _text(content: list[JsonDict]) -> str:
    return "".join(str(b.get("text") or "") for b in content if b.get("type") == "text")


def _tool_turn(
    content: list[JsonDict], raw_inputs: Mapping[int, str]
) -> tuple[TurnEvent, list[JsonDict]]:
    positions = [i for i, b in enumerate(content) if b.get("type") == "tool_use"]
    if not positions:
        return Incomplete(reason="other", detail="stop_reason tool_use without tool_use"), []
    calls = build_calls(
        CallCandidate(
            content[i].get("id"),
            content[i].get("name"),
            raw_inputs.get(i, json.dumps(content[i].get("input"), ensure_ascii=False)),
            content[i],
        )
        for i in positions
    )
    if isinstance(calls, Incomplete):
        return calls, []
    parsed = {i: c.arguments for i, c in zip(positions, calls, strict=True)}
    blocks = [
        {**drop_none(b), "input": parsed[i]} if i in parsed else drop_none(b)
        for i, b in enumerate(content)
    ]
    text = _text(content)
    return ToolRequests(calls=calls, text=text or None), [{"role": "assistant", "content": blocks}]


def from_provider(
    message: JsonDict, raw_inputs: Mapping[int, str] | None = None
) -> tuple[TurnEvent, list[JsonDict]]:
    """Classify a complete message; `raw_inputs` are streamed tool inputs by content position."""
    stop = message.get("stop_reason")
    content: list[JsonDict] = list(message.get("content") or [])
    if stop in INCOMPLETE_STOPS:
        return Incomplete(reason=INCOMPLETE_STOPS[stop], detail=f"stop_reason {stop}"), []
    # An assistant message with empty content is rejected, so none is replayed.
    items = [{"role": "assistant", "content": [drop_none(b) for b in content]}] if content else []
    if stop == "refusal":
        details = message.get("stop_details") or {}
        reason = details.get("explanation") or _text(content) or "refused"
        return Refused(message=str(reason)), items
    if stop == "tool_use":
        return _tool_turn(content, raw_inputs or {})
    if stop not in FINAL_STOPS:
        return Incomplete(reason="other", detail=f"stop_reason {stop!r}"), []
    if any(b.get("type") == "tool_use" for b in content):
        return Incomplete(reason="other", detail=f"tool_use with stop_reason {stop}"), []
    return FinalAnswer(text=_text(content)), items


class MessagesStream:
    """Collects content blocks by `index` until every block stopped and `message_stop`."""

    def __init__(self) -> None:
        self.message: JsonDict = {}
        self.blocks: dict[int, JsonDict] = {}
        self.parts: dict[int, list[str]] = {}
        self.stopped: set[int] = set()
        self.ended = False
        self.problem: Incomplete | None = None
        self.raw_inputs: dict[int, str] = {}
        """Each tool block's input as streamed, by position: `from_provider` tells a
        truncated or malformed input from a valid one by it."""

    def feed(self, event: JsonDict) -> None:
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start":
            self.message = dict(event.get("message") or {})
        elif kind == "content_block_start" and isinstance(index, int):
            self.blocks[index] = dict(event.get("content_block") or {})
            self.parts[index] = []
        elif kind == "content_block_delta" and isinstance(index, int):
            self._delta(index, event.get("delta") or {})
        elif kind == "content_block_stop" and isinstance(index, int):
            self.stopped.add(index)
        elif kind == "message_delta":
            self.message.update(event.get("delta") or {})
            usage = dict(self.message.get("usage") or {})  # message_delta usage is cumulative
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            self.message["usage"] = usage
        elif kind == "message_stop":
            self.ended = True

    def _delta(self, index: int, delta: JsonDict) -> None:
        block = self.blocks.get(index)
        if block is None:
            self.problem = Incomplete(reason="other", detail=f"delta for unknown block {index}")
            return
        kind = delta.get("type")
        if kind == "input_json_delta":
            self.parts[index].append(str(delta.get("partial_json") or ""))
        elif kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking"))
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(delta.get("signature"))
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]

    def finish(self) -> tuple[JsonDict, TurnEvent | None]:
        """The message as assembled and any stream problem; the raw tool inputs by
        position are left in `raw_inputs`."""
        content: list[JsonDict] = []
        raw_inputs = self.raw_inputs
        for position, index in enumerate(sorted(self.blocks)):
            block = dict(self.blocks[index])
            if self.parts[index] or block.get("type") in ("tool_use", "server_tool_use"):
                # The block's `input` starts as {} and is rebuilt from the fragments.
                raw = join_fragments(self.parts[index]) or json.dumps(block.get("input") or {})
                raw_inputs[position] = raw
                # None for truncated, non-object or hostile (too deep) JSON: nothing to show.
                block["input"] = parse_arguments(raw)
            content.append(block)
        message = {**self.message, "content": content}
        unstopped = sorted(set(self.blocks) - self.stopped)
        if not self.message or not self.ended or message.get("stop_reason") is None:
            return message, Incomplete(reason="stream_ended", detail="no message_stop")
        if unstopped:
            detail = f"block {unstopped[0]} has no content_block_stop"
            return message, Incomplete(reason="stream_ended", detail=detail)
        return message, self.problem


@contextlib.contextmanager
def map_errors() -> Iterator[None]:
    """Map every anthropic SDK exception (and the bare httpx2 errors its stream iterator
    lets through) to the error tree, once, at the boundary."""
    import anthropic

    try:
        with map_connection_errors(anthropic.APITimeoutError, anthropic.APIConnectionError):
            yield
    except anthropic.APIStatusError as exc:
        # Status 200 means an `event: error` inside the stream: only the body's type tells.
        error_type = str(exc.type or "")
        kind = (
            ERROR_TYPES.get(error_type, "server_error")
            if exc.status_code < 400
            else kind_for_status(exc.status_code)
        )
        message = exc.api_message or error_message(exc.body, exc.message)
        raise make_error(
            kind, message, status=exc.status_code, headers=exc.response.headers
        ) from exc
    except anthropic.APIError as exc:
        raise make_error("server_error", error_message(exc.body, exc.message)) from exc


def _sdk_version() -> str:
    import anthropic

    return anthropic.__version__


class AnthropicMessagesAdapter(SdkAdapter[MessagesStream, "anthropic.AsyncAnthropic"]):
    """`ProviderAdapter` for the Messages API; streams unless `stream=False`."""

    api = API
    usage_fields = ("input_tokens", "output_tokens")
    assembler = MessagesStream
    to_provider = staticmethod(to_provider)

    def _new_client(self) -> anthropic.AsyncAnthropic:
        """Endpoint and key from ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY; no SDK retries."""
        import anthropic

        return anthropic.AsyncAnthropic(max_retries=0)

    def _map_errors(self) -> AbstractContextManager[None]:
        return map_errors()

    def _record_meta(self) -> RecordMeta:
        version = version_header(self.client.default_headers, "anthropic-version")
        return RecordMeta(PROVIDER, API, _sdk_version(), version)

    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        """One user message whose content is only the tool_result blocks (RULES A1, A4)."""
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": r.provider_call_id,
                "content": r.content,
                "is_error": r.is_error,
            }
            for r in results
        ]
        return [{"role": "user", "content": blocks}] if blocks else []

    def _event(
        self, response: JsonDict, assembler: MessagesStream
    ) -> tuple[TurnEvent, list[JsonDict]]:
        return from_provider(response, assembler.raw_inputs)

    async def _create(self, request: JsonDict, timeout_s: float) -> Any:
        return await self.client.messages.create(**request, timeout=timeout_s)
