"""Scripted model server: a strict local stand-in for the OpenAI and Anthropic APIs.

There is no internet in tests or demos, so callgate talks to this loopback HTTP/1.1 server
through the official SDKs. It speaks OpenAI Responses (`POST /v1/responses`), OpenAI Chat
Completions (`POST /v1/chat/completions`) and Anthropic Messages (`POST /v1/messages`), JSON and
SSE, shaped like the recorded wire data in provider-fixtures/, and it enforces the APIs' own
history rules (exact 400 bodies). What the "model" says comes from scenario scripts (see
`callgate.standins.scripted.scenario` for the format): the request's `model` names the scenario.

    python -m callgate.standins.scripted_model --port 0 [--scenarios MY_DIR ...]
    # prints: listening on http://127.0.0.1:PORT (MY_DIR is searched before the built-ins)

    async with ScriptedModelServer() as server:
        client = AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)
        client = AsyncAnthropic(base_url=server.anthropic_base_url, api_key="x", max_retries=0)

`GET /_log` lists every request (path, scenario, step, faults, status, stream, body, and the
monotonic ns it arrived and was answered at);
`POST /_reset` clears the log and the fault attempt counters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from callgate.standins.scripted.scenario import Scenario
from callgate.standins.scripted.server import ScriptedApp

DEFAULT_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


class ScriptedModelServer:
    """The server in-process (tests): `async with ScriptedModelServer(dir) as s: s.base_url`."""

    def __init__(
        self,
        scenarios_dir: str | Path | Sequence[str | Path] = DEFAULT_SCENARIOS,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        dirs = [scenarios_dir] if isinstance(scenarios_dir, str | Path) else list(scenarios_dir)
        self._app = ScriptedApp([Path(d) for d in dirs])
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app.build(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self._port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> ScriptedModelServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """Anthropic SDK base_url; the OpenAI SDK wants `openai_base_url` (…/v1)."""
        return f"http://{self._host}:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    @property
    def log(self) -> list[dict[str, Any]]:
        """The requests received so far, the last `LOG_LIMIT` (what `GET /_log` returns)."""
        return list(self._app.log)

    def reset(self) -> None:
        self._app.reset()

    def add_scenario(self, name: str, data: dict[str, Any] | Scenario) -> None:
        """Serve a scenario given as data (wins over a file of the same name)."""
        scenario = data if isinstance(data, Scenario) else Scenario.model_validate(data)
        self._app.extra[name] = scenario


async def _serve(port: int, scenarios: Sequence[Path], host: str) -> None:
    server = ScriptedModelServer(scenarios, host=host, port=port)
    await server.start()
    print(f"listening on {server.base_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--scenarios",
        type=Path,
        action="append",
        default=[],
        help="a folder of scenarios (repeatable); each is searched before the "
        "next, the built-in ones last",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_serve(args.port, [*args.scenarios, DEFAULT_SCENARIOS], args.host))


if __name__ == "__main__":
    main()
