"""Signing in and out of the console.

``GET /console/login?token=…`` redeems the one-time link `callgate serve` printed (once, while
fresh) and starts a session for the local operator.  Anyone else pastes a bearer token the API
accepts — `callgate keys token NAME`, or their identity provider's JWT — into the form: the
token is verified by the API's own `authenticate`, and only a person of the trust file gets a
session.  The form carries its own CSRF token (a cookie and a field that must agree)."""

from __future__ import annotations

import hmac
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from callgate.api.callers import Forbidden, as_person, authenticate
from callgate.api.context import context_of
from callgate.clock import now_ms
from callgate.console.render import page
from callgate.console.session import COOKIE, CSRF_FIELD, LOGIN_COOKIE, csrf_ok, sessions_of
from callgate.errors import AuthError

router = APIRouter(include_in_schema=False)
LOGIN_PATH = "/console/login"


def login_url(base: str, token: str) -> str:
    """The link `callgate serve` prints."""
    return f"{base}{LOGIN_PATH}?token={token}"


def _form(request: Request, error: str | None = None, status: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = page("login.html", status=status, caller=None, csrf=token, error=error)
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=600,
        path=LOGIN_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _signed_in(request: Request, person: str, via: str) -> Response:
    response = RedirectResponse("/", status_code=303)
    sessions_of(request).open(response, request, person, via)
    response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH)
    return response


@router.get(LOGIN_PATH)
async def login_page(request: Request, token: str | None = None) -> Response:
    if token is None:
        return _form(request)
    person = sessions_of(request).redeem(token)
    trust = context_of(request).trust.current()
    if person is None or person not in trust.people:
        return _form(
            request,
            "this login link was used already, has expired or is unknown: "
            "ask for a new one, or sign in with a token",
            status=401,
        )
    return _signed_in(request, person, "link")


@router.post(LOGIN_PATH)
async def login_with_token(request: Request) -> Response:
    form = await request.form()
    sent, kept = form.get(CSRF_FIELD), request.cookies.get(LOGIN_COOKIE)
    if not (isinstance(sent, str) and kept and hmac.compare_digest(sent, kept)):
        return _form(request, "missing or wrong CSRF token: try again", status=403)
    token = form.get("token")
    trust = context_of(request).trust.current()
    try:
        caller = authenticate(
            f"Bearer {token if isinstance(token, str) else ''}", trust, now=now_ms() / 1000
        )
        as_person(caller, trust)
    except AuthError as exc:
        return _form(request, f"{exc.reason}: paste a valid token", status=401)
    except Forbidden as exc:
        return _form(request, str(exc), status=403)
    return _signed_in(request, caller.name, caller.via)


@router.post("/console/logout")
async def logout(request: Request) -> Response:
    """End the session (with its CSRF token, so another site cannot sign you out)."""
    session = sessions_of(request).read(request)
    if session is not None and not await csrf_ok(request, session.csrf):
        return page(
            "problem.html",
            status=403,
            caller=None,
            csrf="",
            status_code=403,
            detail="missing or wrong CSRF token: reload the page and try again",
        )
    response = RedirectResponse(LOGIN_PATH, status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
