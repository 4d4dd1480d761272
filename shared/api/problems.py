"""Errors as RFC 9457 problem bodies: a title, the status, and one line saying what to do.

A caller's mistake never shows a traceback: bad JSON or fields are 422 with the first problem,
an unknown run 404, a conflict 409, Redis down 503.  Anything else is a bug: it is logged with
its traceback and the caller gets a bare 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from callgate.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    RedisUnavailableError,
    RunSpecError,
)

log = logging.getLogger("callgate.api")

MEDIA_TYPE = "application/problem+json"
TITLES = {
    400: "bad request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not found",
    405: "method not allowed",
    406: "not acceptable",
    409: "conflict",
    422: "invalid request",
    500: "internal error",
    503: "unavailable",
}


class Problem(Exception):
    """An answer other than success: its status and the one line a caller reads."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def problem(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {
        "type": "about:blank",
        "title": TITLES.get(status, "error"),
        "status": status,
        "detail": " ".join(detail.split()),
    }
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


PROBLEM_SCHEMA: dict[str, Any] = {
    "description": "a problem (RFC 9457): what went wrong and what to do, in one line",
    "content": {
        MEDIA_TYPE: {
            "schema": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "title": {"type": "string"},
                    "status": {"type": "integer"},
                    "detail": {"type": "string"},
                },
            }
        }
    },
}
"""The OpenAPI description of every error answer."""


def _first_error(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "the request does not validate"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    return f"{where or 'body'}: {first.get('msg', 'invalid')}"


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as a problem."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        challenge = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(exc.status, exc.detail, challenge)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return problem(exc.status_code, str(exc.detail))

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem(422, _first_error(exc))

    async def on_known(request: Request, exc: Exception) -> JSONResponse:
        return problem(*known_status(exc))

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("request failed", exc_info=exc)
        return problem(500, "the server failed; its log has the details")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_invalid)
    for kind in (
        RunSpecError,
        NotFoundError,
        ConflictError,
        RedisUnavailableError,
        AuthError,
        RedisError,
    ):
        app.add_exception_handler(kind, on_known)
    app.add_exception_handler(Exception, on_bug)


def known_status(exc: Exception) -> tuple[int, str]:
    """The status and line for an error callgate raises on purpose."""
    if isinstance(exc, RunSpecError):
        return 422, str(exc)
    if isinstance(exc, NotFoundError):
        return 404, str(exc)
    if isinstance(exc, ConflictError):
        return 409, str(exc)
    if isinstance(exc, AuthError):
        return 403, str(exc)
    log.warning("redis unavailable", exc_info=exc)
    return 503, "callgate's Redis is unavailable; try again shortly"
