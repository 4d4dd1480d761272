"""The in-process scripted provider: the real adapters with the SDK call swapped for the
scripted model running in this process.  Benchmark only; it isolates the runtime's own cost.

Each class here *is* the real adapter of its protocol (request mapping, response
classification, history items, the turn record); only ``_create`` differs: instead of sending
the request through the SDK over HTTP, it hands the same request body to the scripted model
server's own logic (`callgate.standins.scripted.server.ScriptedApp`: scenario step, the API's
history rules, the non-stream response body).  So the provider-native history and everything
downstream are exactly what a real adapter produces.

Selected by ``CALLGATE_ADAPTER_FACTORY=callgate.ops.bench.provider:in_process`` in the model_turn
worker's environment; ``…:in_process_timed`` also records, for the latency benchmark, when
each request reached the model and when its answer left (`ModelClock`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from callgate.config import Settings
from callgate.errors import ProviderError
from callgate.keys import Keys
from callgate.providers.anthropic_messages import AnthropicMessagesAdapter
from callgate.providers.base import JsonDict, ProviderAdapter
from callgate.providers.common import error_message, kind_for_status, make_error
from callgate.providers.openai_chat import OpenAIChatAdapter
from callgate.providers.openai_responses import OpenAIResponsesAdapter
from callgate.standins.scripted.scenario import build_turn, load_scenario
from callgate.standins.scripted.server import ScriptedApp
from callgate.standins.scripted.wires import ANTHROPIC, CHAT, RESPONSES, WireFormat
from callgate.standins.scripted_model import DEFAULT_SCENARIOS

MODEL_CPU_DIR_ENV = "CALLGATE_BENCH_MODEL_CPU_DIR"
"""Where each model_turn process writes the CPU its model stand-in spent (`StandInCpu`)."""
MODEL_LOG = "model_log"
"""`Keys.bench` name of the stream where `ModelClock` writes its round trips."""


class ModelClock:
    """Monotonic times a request arrived at the model and its answer left.

    The pair (previous answer left, this request arrived) is one round trip through the
    runtime.  It is written to Redis at the *start* of the next request, i.e. during model
    time, so recording it never lengthens a measured round trip.
    """

    def __init__(self, settings: Settings) -> None:
        self._redis = aioredis.Redis.from_url(settings.redis_url)
        self._key = Keys(settings.key_prefix, settings.partitions).bench(MODEL_LOG)
        self._answered_ns: int | None = None

    async def arrived(self, arrived_ns: int, first_turn: bool) -> None:
        """A request reached the model at ``arrived_ns``; a run's first turn closes no round
        trip."""
        if self._answered_ns is not None and not first_turn:
            fields = {"answered_ns": self._answered_ns, "arrived_ns": arrived_ns}
            await self._redis.xadd(self._key, fields)
        self._answered_ns = None

    def answered(self) -> None:
        self._answered_ns = time.monotonic_ns()


class StandInCpu:
    """The CPU time this process spent inside the model stand-in, kept in a file of its own.

    The stand-in runs inside the model_turn worker, so that worker's CPU holds work no real
    deployment does (a provider answers elsewhere).  With ``MODEL_CPU_DIR_ENV`` set (the
    benchmark's deployment sets it), each answer's thread time is added up and the total
    written, fixed-width, to ``<dir>/<pid>``: no Redis command, so the benchmark's counts stay
    the runtime's own."""

    def __init__(self, directory: str | None) -> None:
        self.spent_ns = 0
        self._fd = None
        if directory:
            path = os.path.join(directory, str(os.getpid()))
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def add(self, started_ns: int) -> None:
        self.spent_ns += time.thread_time_ns() - started_ns
        if self._fd is not None:
            os.pwrite(self._fd, b"%20d" % self.spent_ns, 0)


def stand_in_seconds(directory: str) -> float:
    """The CPU seconds every process's model stand-in spent so far (`StandInCpu`)."""
    total = 0
    for entry in os.scandir(directory):
        with open(entry.path, "rb") as spent:
            total += int(spent.read() or b"0")
    return total / 1e9


class InProcessModel:
    """The scripted model server's logic, called directly; one per worker process."""

    def __init__(self, clock: ModelClock | None = None) -> None:
        self._app = ScriptedApp([DEFAULT_SCENARIOS])
        self._clock = clock
        self.cpu = StandInCpu(os.environ.get(MODEL_CPU_DIR_ENV))

    async def answer(self, wire: WireFormat, request: JsonDict) -> JsonDict:
        """The non-stream response body the server would send, or its error as the SDK's."""
        if self._clock is not None:
            # Stamped before the model reads the request: reading it is the model's time.
            arrived_ns = time.monotonic_ns()
            first_turn = wire.conversation(request).assistant_turns == 0
            await self._clock.arrived(arrived_ns, first_turn)
        started_ns = time.thread_time_ns()
        try:
            return self._answer(wire, request)
        finally:
            self.cpu.add(started_ns)
            if self._clock is not None:
                self._clock.answered()

    def _answer(self, wire: WireFormat, request: JsonDict) -> JsonDict:
        name = str(request.get("model"))
        if name not in self._app.extra:
            # Read once: the server reads the file per request, a cost no model has.
            scenario = load_scenario(name, self._app.dirs)
            if scenario is not None:
                self._app.extra[name] = scenario
        plan = self._app.plan(wire, request)
        if plan.error is not None:
            raise _as_provider_error(plan.error.status, plan.error.body)
        assert plan.scenario is not None and plan.step is not None and plan.conversation
        if plan.faults:
            raise ValueError("the in-process provider injects no faults; use the server")
        step = plan.scenario.steps[plan.step]
        turn = build_turn(step, plan.conversation, (), plan.scenario.model)
        return wire.render_json(turn, request)


def _as_provider_error(status: int, body: Mapping[str, Any]) -> ProviderError:
    """What the adapter's SDK error mapping makes of an HTTP error with this status."""
    message = error_message(dict(body), f"HTTP {status}")
    return make_error(kind_for_status(status), message, status=status)


class InProcess:
    """The SDK call swapped for the in-process model; mixed in before a real adapter."""

    wire: WireFormat
    model: InProcessModel

    async def _create(self, request: JsonDict, timeout_s: float) -> JsonDict:
        return await self.model.answer(self.wire, request)


class InProcessResponses(InProcess, OpenAIResponsesAdapter):
    wire = RESPONSES


class InProcessChat(InProcess, OpenAIChatAdapter):
    wire = CHAT


class InProcessMessages(InProcess, AnthropicMessagesAdapter):
    wire = ANTHROPIC


_CLASSES: dict[str, type[InProcessResponses | InProcessChat | InProcessMessages]] = {
    "openai-responses": InProcessResponses,
    "openai-chat": InProcessChat,
    "anthropic-messages": InProcessMessages,
}
_models: dict[bool, InProcessModel] = {}


def _adapter(api: str, *, timed: bool) -> ProviderAdapter:
    if api not in _CLASSES:
        raise ValueError(f"unknown provider api {api!r}; known: {sorted(_CLASSES)}")
    if timed not in _models:
        _models[timed] = InProcessModel(ModelClock(Settings()) if timed else None)
    adapter = _CLASSES[api](stream=False)
    adapter.model = _models[timed]
    return adapter


def in_process(api: str) -> ProviderAdapter:
    """Adapter factory (``CALLGATE_ADAPTER_FACTORY``): the in-process scripted provider."""
    return _adapter(api, timed=False)


def in_process_timed(api: str) -> ProviderAdapter:
    """Adapter factory: the in-process scripted provider, recording round trips (`ModelClock`)."""
    return _adapter(api, timed=True)
