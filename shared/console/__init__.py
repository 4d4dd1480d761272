"""The web console (`callgate serve` at ``/``): runs with live status, a run's timeline, and
the inbox where a person approves, denies and resolves — through the API's own action routes.

Server-rendered HTML (Jinja2, autoescaped) and one static script for live updates (an
`EventSource` per page); no build step.  `install` mounts it on the API's app and keeps its
sessions (`callgate.console.session`) where `callgate.api.context.current_caller` finds them.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from callgate.console import acts, login, pages
from callgate.console.render import STATIC
from callgate.console.session import Sessions
from callgate.console.settings import ConsoleSettings


def install(app: FastAPI, settings: ConsoleSettings | None = None) -> Sessions:
    """Serve the console on ``app``; its sessions (which also mint the login link)."""
    sessions = Sessions.create(settings or ConsoleSettings())
    app.state.sessions = sessions
    for module in (pages, acts, login):
        app.include_router(module.router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    return sessions
