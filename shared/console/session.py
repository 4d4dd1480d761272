"""Console sessions: the one-time login link, the signed session cookie, and CSRF.

`callgate serve` prints a login link for the deployment's local operator (like Jupyter's token
URL): its token lives only in this process, works once, and expires after ``login_ttl_s``.
Anyone else signs in with a bearer token the API would accept (`callgate keys token NAME`, or
an identity provider's JWT from the trust file's ``issuers``).  Either way the session is a
cookie signed with itsdangerous — HttpOnly, SameSite=Strict — that names the person and a
random CSRF token; the person's roles are read from the trust file on every request, never
kept in the cookie.  Every request that changes something and carries the cookie (instead of
a bearer header) must also carry the session's CSRF token, as the ``csrf`` form field or the
``X-CSRF-Token`` header.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from fastapi import Request, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from callgate.api.callers import Caller
from callgate.api.problems import Problem
from callgate.auth.trust import TrustConfig
from callgate.console.settings import ConsoleSettings
from callgate.errors import AuthError

COOKIE = "callgate_session"
LOGIN_COOKIE = "callgate_login"
"""The login form's own CSRF token (double-submit: cookie and field must agree)."""
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Session:
    """What a session cookie says: who, how they signed in, and the session's CSRF token."""

    person: str
    via: str
    csrf: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Sessions:
    """This server's login links and session cookies."""

    settings: ConsoleSettings
    serializer: URLSafeTimedSerializer
    links: dict[str, tuple[str, float]] = field(default_factory=dict)
    """sha256(link token) → (person, monotonic expiry); a token is removed when used."""

    @classmethod
    def create(cls, settings: ConsoleSettings) -> Sessions:
        secret = (
            settings.secret.get_secret_value()
            if settings.secret is not None
            else secrets.token_urlsafe(32)
        )
        return cls(settings, URLSafeTimedSerializer(secret, salt="callgate.console.session"))

    def issue_link(self, person: str) -> str:
        """A fresh one-time login token for ``person``."""
        token = secrets.token_urlsafe(24)
        self.links[_digest(token)] = (person, time.monotonic() + self.settings.login_ttl_s)
        return token

    def redeem(self, token: str) -> str | None:
        """The person a login token is for, once: used, expired or unknown → None."""
        person, expires = self.links.pop(_digest(token), ("", 0.0))
        return person if person and time.monotonic() < expires else None

    def open(self, response: Response, request: Request, person: str, via: str) -> None:
        """Start a session for ``person``: the signed cookie on ``response``."""
        value = self.serializer.dumps({"p": person, "via": via, "csrf": secrets.token_urlsafe(24)})
        response.set_cookie(
            COOKIE,
            value,
            max_age=int(self.settings.session_ttl_s),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def read(self, request: Request) -> Session | None:
        """The request's valid session, or None (no cookie, a forged or expired one)."""
        value = request.cookies.get(COOKIE)
        if not value:
            return None
        try:
            data = self.serializer.loads(value, max_age=int(self.settings.session_ttl_s))
        except BadSignature:
            return None
        if not isinstance(data, dict):
            return None
        return Session(str(data.get("p", "")), str(data.get("via", "")), str(data.get("csrf", "")))

    async def caller(self, request: Request, trust: TrustConfig) -> Caller:
        """The person the session cookie names, with their roles from the trust file now;
        `AuthError` (401) without a valid session, a 403 `Problem` for a change without the
        session's CSRF token."""
        session = self.read(request)
        if session is None:
            raise AuthError("no valid console session (sign in again)")
        if session.person not in trust.people:
            raise AuthError(f"{session.person} is no longer a person of the trust file")
        if request.method not in SAFE_METHODS and not await csrf_ok(request, session.csrf):
            raise Problem(403, "missing or wrong CSRF token: reload the page and try again")
        return Caller(
            session.person, "person", trust.roles_of(session.person), f"console:{session.via}"
        )


async def csrf_ok(request: Request, expected: str) -> bool:
    """Whether the request carries ``expected`` (header or form field), compared in constant
    time."""
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and "form" in request.headers.get("content-type", ""):
        value = (await request.form()).get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    return bool(expected) and sent is not None and hmac.compare_digest(sent, expected)


def sessions_of(request: Request) -> Sessions:
    found: Sessions = request.app.state.sessions
    return found
