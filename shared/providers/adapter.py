"""The `ProviderAdapter` body every SDK adapter shares (`SdkAdapter`): one SDK call under
the adapter's error boundary and the turn's deadline, a stream drained into the API's
assembler, and the turn record.

A subclass supplies only what its API defines: the client, the error mapping, the request
and response mapping, the history items, the usage field names and the SDK call.
"""

from __future__ import annotations

import abc
import asyncio
import functools
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from callgate.errors import ProviderError
from callgate.providers.base import JsonDict, ToolResultInput, TurnEvent, TurnInput, TurnOutcome
from callgate.providers.common import RecordMeta, as_dict, outcome, settle, to_failed


class Assembler(Protocol):
    """Builds one complete response from a stream's events."""

    def feed(self, event: JsonDict) -> None: ...

    def finish(self) -> tuple[JsonDict, TurnEvent | None]:
        """The response as assembled, and what the stream itself says is wrong, if anything."""
        ...


class RequestBuilder(Protocol):
    def __call__(self, turn: TurnInput, *, stream: bool) -> JsonDict:
        """The SDK call's arguments for a turn."""
        ...


class SdkClient(Protocol):
    async def close(self) -> None:
        """Close the client's HTTP connections."""
        ...


A = TypeVar("A", bound=Assembler)
C = TypeVar("C", bound=SdkClient)


class SdkAdapter(abc.ABC, Generic[A, C]):
    """One API spoken through its official SDK (client type `C`); streams unless
    `stream=False`, assembling the events with `A`."""

    api: str
    usage_fields: tuple[str, str]
    """Names of the input and output token counts in the response's `usage`."""
    assembler: type[A]
    to_provider: RequestBuilder

    def __init__(self, *, stream: bool = True) -> None:
        self.stream = stream
        self._client: C | None = None

    @property
    def client(self) -> C:
        """Made on first use: importing an SDK takes seconds a process may not need."""
        if self._client is None:
            self._client = self._new_client()
        return self._client

    async def aclose(self) -> None:
        """Close the SDK client's connections, if it was made (inside the loop that used it:
        left to the garbage collector, it closes them after the loop ended, and fails)."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def initial_history(self, user_input: str) -> list[JsonDict]:
        return [{"role": "user", "content": user_input}]

    def correction_items(self, text: str) -> list[JsonDict]:
        return [{"role": "user", "content": text}]

    @abc.abstractmethod
    def result_items(self, results: list[ToolResultInput]) -> list[JsonDict]:
        """Tool results as this API's history items, each under its own call id."""

    @abc.abstractmethod
    def _new_client(self) -> C:
        """The SDK client; endpoint and key from the SDK's own environment variables."""

    @abc.abstractmethod
    def _map_errors(self) -> AbstractContextManager[None]:
        """The SDK's exceptions mapped to the error tree, once, at the boundary."""

    @abc.abstractmethod
    def _record_meta(self) -> RecordMeta:
        """Provider, API and versions for the turn record."""

    @abc.abstractmethod
    def _event(self, response: JsonDict, assembler: A) -> tuple[TurnEvent, list[JsonDict]]:
        """A complete response's event and the items it adds to the history."""

    @abc.abstractmethod
    async def _create(self, request: JsonDict, timeout_s: float) -> Any:
        """The SDK call: a response object, or an SDK stream of events when streaming."""

    async def complete(self, turn: TurnInput) -> TurnOutcome:
        assembler = self.assembler()
        request = self.to_provider(turn, stream=self.stream)
        try:
            with self._map_errors():
                async with asyncio.timeout(turn.timeout_s):
                    response, problem = await self._call(request, assembler, turn.timeout_s)
        except ProviderError as exc:
            return self._outcome(to_failed(exc), assembler.finish()[0], [])
        event, items = self._event(response, assembler)
        return self._outcome(settle(event, problem), response, items)

    async def _call(
        self, request: JsonDict, assembler: A, timeout_s: float
    ) -> tuple[JsonDict, TurnEvent | None]:
        created = await self._create(request, timeout_s)
        if not self.stream:
            return as_dict(created), None
        async with created:
            async for event in created:
                assembler.feed(as_dict(event))
        return assembler.finish()

    @functools.cached_property
    def _meta(self) -> RecordMeta:
        """Read once: an SDK client builds its default headers anew on every read."""
        return self._record_meta()

    def _outcome(self, event: TurnEvent, raw: JsonDict, items: list[JsonDict]) -> TurnOutcome:
        usage = raw.get("usage") or {}
        inputs, outputs = self.usage_fields
        return outcome(
            self._meta,
            event,
            raw,
            response_id=raw.get("id"),
            usage=(usage.get(inputs), usage.get(outputs)),
            items=items,
        )
