"""The one redaction pass every event payload goes through before it reaches the event log.

The event log is read by people and shipped to other systems, so it must never hold secrets:
keys that name credentials, fields a tool marks sensitive, and values that look like bearer
tokens or API keys are replaced, and long strings are cut (an event summarises, the ledger
records).  Pure; no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from typing import Any

import orjson

from callgate.logs import mask_url_password, secret_values

REDACTED = "[redacted]"
MAX_EVENT_STRING = 512
"""Strings longer than this are cut in events; the full value lives in the ledger record."""

_SECRET_KEY = re.compile(
    r"(^|_)(api_?key|authorization|auth|secret|client_secret|password|passwd|passphrase"
    r"|token|access_token|refresh_token|id_token|cookie|set_cookie|credentials?|private_key"
    r"|signing_key|session|session_id)($|_)"
)
"""Word-wise, so ``input_tokens`` and ``author`` stay readable while ``x_api_key`` does not."""
_TOKEN = r"(?=[A-Za-z0-9+/._~=-]*(?:[0-9+/._~=-]|[a-z][A-Z]))[A-Za-z0-9+/._~-]{8,}=*"
"""A credential after ``Basic``: 8+ token characters with a digit, a symbol or a lower-to-upper
change, so prose ("a basic example") stays; anything after ``Bearer`` is taken as a token."""
_SECRET_IN_TEXT = re.compile(
    r"(?i:[bsx])(?<![A-Za-z0-9_-].)"  # a first-letter class lets the engine skip to candidates
    r"(?:(?i:earer)\s+\S+|(?i:asic)\s+"
    + _TOKEN
    + r"|(?i:k-)[A-Za-z0-9_-]{12,}|(?i:k-ant-)\S+|(?i:ox[abprs]-)\S+)"
)
"""API keys and bearer tokens anywhere in a string: each is replaced, the text around kept.
One compiled pattern, run over every string of every event."""
_SHORTEST_SECRET = 6
"""The fewest characters `_SECRET_IN_TEXT` matches (``xoxb-`` and one more): most of an
event's strings (states, ids, codes) are shorter and need no scan."""
_SCAN_MARGIN = 256
"""A string cut for an event is scanned this far past the cut, so a secret that straddles
the cut is matched whole before the cut hides its end."""


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Cached: every event is redacted, and its keys are nearly always the same few names."""
    return _SECRET_KEY.search(key.lower().replace("-", "_")) is not None


def redact(data: Any, sensitive: Collection[str] = frozenset()) -> Any:
    """A copy of ``data`` without secrets; ``sensitive`` adds field names a tool marks private.

    Every event of every step comes through here, so the common types are tested first."""
    kind = type(data)
    if kind is str:
        return _redact_text(data)
    if kind is int or data is None:
        return data
    if isinstance(data, dict):
        clean: dict[Any, Any] = {}
        for key, value in data.items():
            if isinstance(key, str) and (key in sensitive or is_secret_key(key)):
                clean[key] = REDACTED
            elif type(value) is int or value is None:
                clean[key] = value  # inline: a call per leaf was most of an event's cost
            elif type(value) is str:
                clean[key] = _redact_text(value)
            else:
                clean[key] = redact(value, sensitive)
        return clean
    if isinstance(data, list | tuple):
        return [
            _redact_text(item) if type(item) is str else redact(item, sensitive) for item in data
        ]
    if isinstance(data, str):
        return _redact_text(data)
    return data


def _redact_text(text: str) -> str:
    if len(text) < _SHORTEST_SECRET:
        return text
    if len(text) <= MAX_EVENT_STRING:
        return _SECRET_IN_TEXT.sub(REDACTED, text)
    head = _SECRET_IN_TEXT.sub(REDACTED, text[: MAX_EVENT_STRING + _SCAN_MARGIN])
    return f"{head[:MAX_EVENT_STRING]}…(+{len(text) - MAX_EVENT_STRING} chars)"


def mask_secrets(text: str) -> str:
    """``text`` whole, with every API key and bearer token in it masked: `redact`'s pass for
    a string that must not be cut (a case file's recorded arguments)."""
    return _SECRET_IN_TEXT.sub(REDACTED, text)


def redact_error(exc: BaseException, echoed: Collection[str] = ()) -> str:
    """``Type: message`` of an exception, safe for the ledger, the event log and the model.

    A tool's exception text is free text from code callgate does not control: it may quote a
    URL with its password, a bearer token, a configured secret or a value the tool marks
    sensitive (``echoed``, see `sensitive_values`), so each is masked and the text is cut like
    any event string."""
    text = mask_url_password(str(exc))
    text = scrub(text, [v for v in (*secret_values(), *echoed) if v])
    return _redact_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


ECHO_MIN_CHARS = 4
"""Sensitive values shorter than this are not scrubbed from free text: blanking every "42" of
an answer would hide more than it protects."""


def sensitive_values(data: Any, fields: Collection[str]) -> set[str]:
    """The text of every scalar under a ``fields`` key, at any depth of ``data``: what a
    model's free text may repeat, since it saw the arguments and the results."""
    found: set[str] = set()
    _collect(data, fields, False, found)
    return {v for v in found if len(v) >= ECHO_MIN_CHARS}


def _collect(data: Any, fields: Collection[str], inside: bool, found: set[str]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _collect(value, fields, inside or key in fields, found)
    elif isinstance(data, list | tuple):
        for item in data:
            _collect(item, fields, inside, found)
    elif inside and isinstance(data, str | int | float) and not isinstance(data, bool):
        found.add(str(data))


def scrub(text: str, values: Collection[str]) -> str:
    """``text`` with every occurrence of ``values``, as written or JSON-escaped, replaced by
    the marker; longest first, so a value containing another goes whole."""
    forms = {form for v in values for form in (v, orjson.dumps(v).decode()[1:-1])}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text
