"""The one way a worker process starts: settings, logging, Redis, ledger, stream loop.

`services/<name>.py` modules stay thin: they define a handler factory and call
`run_service`; reading, acking, reclaiming and shutdown live in `shared/streams/worker.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from pydantic import ValidationError

from callgate import eventloop
from callgate.auth.deployment import TrustSource
from callgate.compiled import StaleBuildError, check_build
from callgate.config import Settings, bad_settings
from callgate.connect import RedisClient, redis_client
from callgate.envelopes import (
    CARRIED_ON,
    CallEnvelopeBase,
    EnvelopeBase,
    ValidateRequest,
    home_stream,
)
from callgate.errors import (
    DurabilityError,
    KeyFileError,
    NewerSchemaError,
    TracingConfigError,
    TrustConfigError,
)
from callgate.keys import Keys
from callgate.ledger.schema import join_ledger_schema
from callgate.ledger.store import Ledger
from callgate.logs import log_fields, setup_logging
from callgate.states import RUN_TERMINAL, RunState
from callgate.streams.upkeep import announce
from callgate.streams.worker import DeadLetter, Handler, StreamWorker
from callgate.telemetry import spans, start_tracing, stop_tracing
from callgate.telemetry.context import traced
from callgate.tools.mcp_policy import HookError
from callgate.tools.mcp_servers import parse_servers
from callgate.tools.mcp_source import open_mcp_tools
from callgate.tools.registry import RegistryError, ToolRegistry, load_registry

log = logging.getLogger("callgate.service")

STARTUP_ERRORS = (
    TrustConfigError,
    KeyFileError,
    RegistryError,
    TracingConfigError,
    StaleBuildError,
    DurabilityError,
    NewerSchemaError,
)
"""What a worker meets at start-up when the deployment's own files (or its Redis) are wrong."""
START_FAILED = 2
"""The exit code of a worker that could not start (`run_worker`)."""
GC_THRESHOLD = 20_000
"""Allocations between young-generation collections (CPython's default is 700)."""


@dataclass
class Runtime:
    """What every handler needs, built once per process."""

    name: str
    settings: Settings
    redis: RedisClient
    keys: Keys
    ledger: Ledger
    consumer: str
    registry: ToolRegistry
    """The deployment's tools (``CALLGATE_TOOL_MODULES``), loaded once at start-up."""
    trust: TrustSource
    """Who the deployment trusts (``CALLGATE_TRUST_FILE``): submitters, people, delegates."""
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """What a handler factory opened, closed before Redis on shutdown."""
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)

    def tool_session(self) -> aiohttp.ClientSession:
        """The HTTP session every tool call of this process gets in its context (made on
        first use, inside the event loop; closed on shutdown)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self.closers.append(self._session.close)
        return self._session

    async def close_tools(self) -> None:
        """Close what the handler factories opened (sessions, pools), newest first."""
        while self.closers:
            await self.closers.pop()()
        self._session = None

    async def close(self) -> None:
        await self.close_tools()
        await self.ledger.aclose()
        await self.redis.aclose()


def consumer_name(service: str, pid: int | None = None) -> str:
    """The consumer a worker process reads as (``pid``: another process's, e.g. a killed one)."""
    return f"{service}-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


async def open_tool_sources(runtime: Runtime) -> None:
    """Add the deployment's MCP servers' tools to ``runtime.registry`` (one session per
    server for this process, closed with the runtime), and replace it whenever a server's
    tool list changes.  Nothing to do without servers."""
    if not runtime.settings.mcp_servers:
        return
    try:
        servers = parse_servers(runtime.settings.mcp_servers)
    except ValueError as exc:
        raise RegistryError(str(exc)) from exc
    try:
        opened = await open_mcp_tools(servers, runtime.settings.tool_timeout_s)
    except HookError as exc:
        raise RegistryError(str(exc)) from exc
    runtime.closers.append(opened.close)
    local = runtime.registry

    def changed() -> None:  # a server's tool list changed: the handlers see the new registry
        runtime.registry = local.with_tools(opened.tools)
        log.info(
            "mcp tools registered",
            extra=log_fields(
                service=runtime.name, tools={tool.name: source for tool, source in opened.tools}
            ),
        )

    changed()
    opened.on_change = changed


def build_runtime(name: str, settings: Settings | None = None) -> Runtime:
    settings = settings or Settings()
    client = redis_client(settings.redis_url)
    keys = Keys(settings.key_prefix, settings.partitions)
    ledger = Ledger(client, keys, settings)
    registry = load_registry(settings.tool_modules)
    trust = TrustSource(settings)
    return Runtime(name, settings, client, keys, ledger, consumer_name(name), registry, trust)


DeadLetterHook = Callable[["Runtime", DeadLetter], Awaitable[None]]


@dataclass(frozen=True)
class ServiceSpec:
    """One worker kind: its consumer group, the stream kinds it reads (each taking only the
    kinds `CARRIED_ON` it), its handler, and what a dead letter of its messages means
    (`fails_bound_run` for most)."""

    name: str
    stream_kinds: Sequence[str]
    make_handler: Callable[[Runtime], Awaitable[Handler]]
    on_dead_letter: DeadLetterHook | None = None


def fails_bound_run(*kinds: type[EnvelopeBase]) -> DeadLetterHook:
    """The hook for a worker whose dead letters of ``kinds`` fail the run they belong to."""

    async def hook(runtime: Runtime, letter: DeadLetter) -> None:
        await fail_bound_run(runtime, letter, kinds)

    return hook


async def fail_bound_run(
    runtime: Runtime, letter: DeadLetter, kinds: tuple[type[EnvelopeBase], ...]
) -> None:
    """A poison message fails its run with the reason — but only a message this worker is
    for, that came on its own work stream (the one that carries its kind: a decisions stream
    others may write never counts), bound to the run's current turn and to calls of it: a
    forged or misrouted message naming a live run is dead-lettered and fails nothing."""
    envelope = letter.envelope
    if envelope is None or not isinstance(envelope, kinds) or not on_home_stream(runtime, letter):
        return
    run, calls = await runtime.ledger.run_and_calls(envelope.run_id, _bound_calls(envelope))
    if run is None or run.status in RUN_TERMINAL or run.turn != envelope.turn:
        return
    if any(call is None or call.turn != envelope.turn for call in calls):
        return
    tx = await runtime.ledger.end_run(run, RunState.FAILED, f"dead letter: {letter.reason}")
    if (await runtime.ledger.apply(tx)).ok:
        spans.run_ended(run, RunState.FAILED)


def on_home_stream(runtime: Runtime, letter: DeadLetter) -> bool:
    """Whether the dead message came on the one stream that carries its kind (a worker's own
    work stream for it), the only place a message that may end a run comes from."""
    envelope = letter.envelope
    home = None if envelope is None else home_stream(type(envelope))
    return home is not None and letter.stream in runtime.keys.streams(home)


def _bound_calls(envelope: EnvelopeBase) -> tuple[str, ...]:
    """The calls a message names, each of which must be of its turn for it to end the run."""
    if isinstance(envelope, CallEnvelopeBase):
        return (envelope.call_id,)
    if isinstance(envelope, ValidateRequest):
        return envelope.call_ids
    return ()


async def serve(spec: ServiceSpec, runtime: Runtime, *, burst: bool = False) -> int:
    """Run the service's stream loop until stopped (or drained, in burst mode)."""
    await join_ledger_schema(runtime.redis, runtime.keys)
    await open_tool_sources(runtime)
    handler = traced(await spec.make_handler(runtime))  # itself unless tracing is on
    accepts = {
        stream: CARRIED_ON[kind]
        for kind in spec.stream_kinds
        for stream in runtime.keys.streams(kind)
    }
    streams = list(accepts)

    async def dead_letter(letter: DeadLetter) -> None:
        if spec.on_dead_letter is not None:
            await spec.on_dead_letter(runtime, letter)

    worker = StreamWorker(
        runtime.redis,
        runtime.settings,
        group=spec.name,
        streams=streams,
        handler=handler,
        consumer=runtime.consumer,
        on_dead_letter=dead_letter,
        accepts=accepts,
    )
    if burst:
        return await worker.run_burst()
    install_signal_handlers(worker)
    durability, wire = runtime.settings.write_durability, runtime.ledger.pipe.transport
    fields = log_fields(service=spec.name, streams=streams, durability=durability, wire=wire)
    log.info("serving", extra=fields)
    presence = asyncio.create_task(
        announce(runtime.redis, runtime.keys.consumers(spec.name), runtime.consumer)
    )
    try:
        await worker.run()
    finally:
        presence.cancel()
    return 0


def install_signal_handlers(worker: StreamWorker) -> None:
    """SIGTERM/SIGINT: graceful shutdown; a second signal cancels in-flight work at once."""
    loop = asyncio.get_running_loop()

    def _on_signal(signum: int) -> None:
        force = worker.shutdown_requested
        log.info("signal received", extra=log_fields(signal=signum, force=force))
        worker.notify_shutdown(force=force)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, sig)


def tune_gc() -> None:
    """Keep the cyclic garbage collector off the hot path of a long-running worker.

    A worker imports two provider SDKs, pydantic schemas and its tools: hundreds of thousands
    of long-lived objects that every full collection walked again (about 150 ms each, a
    quarter of a busy worker's CPU).  `gc.freeze` takes what start-up built out of the
    collector's sight; a larger first threshold lets the many short-lived objects of each
    message die by reference counting before a collection looks at them.
    """
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 20)


def main(spec: ServiceSpec, argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m callgate.services.{spec.name}")
    parser.add_argument("--burst", action="store_true", help="drain the streams, then exit")
    args = parser.parse_args(argv)
    setup_logging(spec.name)
    tune_gc()

    async def _run() -> None:
        runtime = build_runtime(spec.name)
        try:
            await serve(spec, runtime, burst=args.burst)
        finally:
            await runtime.close()

    run_worker(spec.name, _run())


def run_worker(name: str, work: Coroutine[Any, Any, Any]) -> None:
    """Run a worker process's loop.  A deployment mistake found at start-up (a setting, a
    trust file, a key or a tool module that does not load, a Redis short of the write
    durability asked) is one logged line and exit 2, not a traceback: the process cannot
    serve until the deployment is fixed."""
    tracing = None
    try:
        try:
            check_build()
            tracing = start_tracing(name)
        except (StaleBuildError, TracingConfigError, ValidationError):
            work.close()
            raise
        eventloop.run(work)
    except (*STARTUP_ERRORS, ValidationError) as exc:
        reason = bad_settings(exc) if isinstance(exc, ValidationError) else str(exc)
        if reason is None:
            raise  # another model's: a bug
        log.error(
            "cannot start: fix the deployment and start again",
            extra=log_fields(service=name, reason=reason),
        )
        raise SystemExit(START_FAILED) from None
    finally:
        stop_tracing(tracing)
