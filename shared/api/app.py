"""`create_app`: the one ASGI app of the HTTP API, which metrics and the console mount onto.

FastAPI (on Starlette) routes and documents it: the OpenAPI document is at ``/openapi.json``
and every route but ``/healthz``, ``/metrics`` (Prometheus, `callgate.metrics`: counts, never a
run's content) and the document needs a bearer token (`callgate.api.callers`); the web console
(`callgate.console`) is at ``/``, its pages behind a session cookie.
The deployment's connections open when the app starts and close when it stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.security import HTTPBearer

from callgate import console
from callgate.api import actions, events, inbox, openapi, problems, runs
from callgate.api.context import ApiContext
from callgate.api.settings import ApiSettings
from callgate.config import Settings
from callgate.metrics.export import MetricsApp, metrics_route

TITLE = "callgate HTTP API"
VERSION = "1"
DESCRIPTION = (
    "Start runs, read them and their live events, and act on what waits for a "
    "person. Every request carries `Authorization: Bearer TOKEN`: a token signed "
    "with your own key (`callgate keys token NAME`) or a JWT from an identity "
    "provider the deployment's trust file lists. Errors are "
    "`application/problem+json` with one line saying what to do."
)


def create_app(settings: Settings | None = None, api: ApiSettings | None = None) -> FastAPI:
    """The API of the deployment ``settings`` name (default: the environment's)."""
    settings = settings or Settings()
    api = api or ApiSettings()
    metrics = MetricsApp(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.callgate = ApiContext.open(settings, api)
        try:
            yield
        finally:
            await app.state.callgate.close()
            await metrics.aclose()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    problems.install(app)
    openapi.install(app)
    # Names the bearer scheme in the OpenAPI document; the token itself is checked by
    # `callgate.api.context.current_caller` (HTTPBearer alone would answer 403, not 401).
    bearer = HTTPBearer(
        auto_error=False, description="callgate keys token NAME, or an identity provider's JWT"
    )
    for module in (runs, events, actions, inbox):
        app.include_router(module.router, dependencies=[Depends(bearer)])

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, bool]:
        """Liveness: the process answers (no token needed)."""
        return {"ok": True}

    app.router.routes.append(metrics_route(metrics))
    console.install(app)
    return app
