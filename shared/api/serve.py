"""`callgate serve [--host 127.0.0.1] [--port 8080]`: the HTTP API under uvicorn.

Reads the deployment from the environment like every worker (``REDIS_URL``,
``CALLGATE_TRUST_FILE``, ``CALLGATE_SUBMITTER`` + ``CALLGATE_SIGNING_KEY`` — the key it signs
submissions with — and ``CALLGATE_API_DELEGATE`` + ``CALLGATE_API_DELEGATE_KEY``, the delegate
key it signs people's decisions with).  Prints ``listening on http://HOST:PORT`` once it serves
(port 0: a free one), then the web console's one-time login link for ``CALLGATE_CONSOLE_OPERATOR``
when it names a person.  Exit codes: 0 stopped; 1 cannot start (said in one line); 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from typing import Any

from callgate.api.settings import ApiSettings
from callgate.config import Settings
from callgate.errors import CallgateError
from callgate.ops.stack import sigterm_as_interrupt

BACKLOG = 2048
"""uvicorn's own backlog: connections made before it serves (its start-up reads the trust
file and connects to Redis) wait in it rather than being refused."""


def add_command(sub: Any) -> None:
    defaults = ApiSettings()
    serve = sub.add_parser("serve", help="the HTTP API (runs, live events, inbox, actions)")
    serve.add_argument("--host", default=defaults.host, help=f"default {defaults.host}")
    serve.add_argument(
        "--port",
        type=_port,
        default=defaults.port,
        help=f"default {defaults.port}; 0 picks a free port",
    )
    serve.set_defaults(handler=cmd_serve)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {port}")
    return port


def console_operator(console: Any, people: Any) -> str | None:
    """The person the login link is for (``CALLGATE_CONSOLE_OPERATOR``), if the trust file
    lists them; else None, said in one line (the API serves regardless)."""
    name: str | None = console.operator
    if name is not None and name not in people:
        print(
            f"callgate serve: no console login link: CALLGATE_CONSOLE_OPERATOR names "
            f"{name!r}, who is not a person of the trust file",
            file=sys.stderr,
        )
        return None
    return name


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # here, not at the top: every other command would load the web stack

    from callgate.api.app import create_app
    from callgate.api.context import preflight
    from callgate.console.login import login_url
    from callgate.console.settings import ConsoleSettings

    sigterm_as_interrupt()
    api = ApiSettings(host=args.host, port=args.port)
    try:
        settings = Settings()
        trust, _ = preflight(settings, api)
        console = ConsoleSettings()
        operator = console_operator(console, trust.current().people)
        app = create_app(settings, api)
        sock = socket.socket(socket.AF_INET6 if ":" in api.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((api.host, api.port))
        sock.listen(BACKLOG)  # before "listening on": a client may connect the moment it reads it
    except (CallgateError, OSError, ValueError) as exc:
        print(f"callgate serve: cannot start: {exc}", file=sys.stderr)
        return 1
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"callgate serve: listening on http://{shown}:{port}", flush=True)
    if operator is not None:
        link = login_url(f"http://{shown}:{port}", app.state.sessions.issue_link(operator))
        print(
            f"callgate serve: web console for {operator} (one-time login link, "
            f"{console.login_ttl_s:.0f} s): {link}",
            flush=True,
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve(sockets=[sock]))
    return 0
