"""`callgate serve [--host 127.0.0.1] [--port 8080]`: the HTTP API under uvicorn.

Reads the deployment from the environment like every worker (``REDIS_URL``,
``CALLGATE_TRUST_FILE``, ``CALLGATE_SUBMITTER`` + ``CALLGATE_SIGNING_KEY`` — the key it signs
submissions with — and ``CALLGATE_API_DELEGATE`` + ``CALLGATE_API_DELEGATE_KEY``, the delegate
key it signs people's decisions with).  Prints ``listening on http://HOST:PORT`` once it serves
(port 0: a free one).  Exit codes: 0 stopped; 1 cannot start (said in one line); 2 usage.
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


def add_command(sub: Any) -> None:
    defaults = ApiSettings()
    serve = sub.add_parser("serve", help="the HTTP API (runs, live events, inbox, actions)")
    serve.add_argument("--host", default=defaults.host, help=f"default {defaults.host}")
    serve.add_argument("--port", type=_port, default=defaults.port,
                       help=f"default {defaults.port}; 0 picks a free port")
    serve.set_defaults(handler=cmd_serve)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, not {port}")
    return port


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # here, not at the top: every other command would load the web stack

    from callgate.api.app import create_app
    from callgate.api.context import preflight

    sigterm_as_interrupt()
    api = ApiSettings(host=args.host, port=args.port)
    try:
        settings = Settings()
        preflight(settings, api)
        app = create_app(settings, api)
        sock = socket.socket(socket.AF_INET6 if ":" in api.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((api.host, api.port))
    except (CallgateError, OSError, ValueError) as exc:
        print(f"callgate serve: cannot start: {exc}", file=sys.stderr)
        return 1
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"callgate serve: listening on http://{shown}:{port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve(sockets=[sock]))
    return 0
