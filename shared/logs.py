"""Structured, redacted process logs: one JSON object per line on stderr.

Redaction happens in the formatter, so no call site can forget it: values of secret-looking
keys are replaced, every configured secret value (API keys from the environment, the password
in ``REDIS_URL``, planted test secrets) is masked wherever it appears in the rendered line, and
so is the password of any URL in it.  Output that is not a log line (`callgate up` printing
where Redis is) masks its URLs with `mask_url_password`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

SECRET_KEY_PARTS = ("api_key", "apikey", "authorization", "secret", "password", "token", "cookie")
_ENV_SECRETS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "CALLGATE_SLACK_SIGNING_SECRET",
    "CALLGATE_SLACK_BOT_TOKEN",
)
MASK = "[redacted]"

_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s/?#@:\"'<>\\]*:)[^\s/?#\"<>\\]*@"
    r"(?=[^\s/?#@\"'<>\\]*(?:[\s/?#\"'<>\\]|$))",
    re.IGNORECASE,
)
"""``scheme://user:PASSWORD@host``; the password runs to the host's ``@`` (the last one)."""
_QUERY_SECRET = re.compile(
    rf"(?P<head>[?&][^\s=&#]*(?:{'|'.join(SECRET_KEY_PARTS)})[^\s=&#]*=)[^\s&#\"'<>\\]+",
    re.IGNORECASE,
)
"""``?password=…`` (redis-py takes a password from the query too), ``&token=…``."""


def mask_url_password(text: str) -> str:
    """``text`` with the password of every URL in it masked, the user and host kept:
    ``redis://workers:s3cret@redis:6379/0`` → ``redis://workers:[redacted]@redis:6379/0``."""
    if "://" not in text and "=" not in text:
        return text
    masked = _URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)
    return _QUERY_SECRET.sub(rf"\g<head>{MASK}", masked)


def url_passwords(url: str) -> list[str]:
    """The password in ``url`` as written and decoded (either may be what gets printed)."""
    try:
        raw = urlsplit(url).password or ""
    except ValueError:
        return []
    return [raw, unquote(raw)]


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Cached: log lines repeat the same few field names."""
    lowered = key.lower()
    return any(part in lowered for part in SECRET_KEY_PARTS)


def redact(value: Any, sensitive: Iterable[str] = ()) -> Any:
    """A copy of ``value`` with secret-looking and ``sensitive`` keys masked, recursively."""
    extra = frozenset(sensitive)
    if isinstance(value, Mapping):
        return {
            k: MASK if (is_secret_key(str(k)) or k in extra) else redact(v, extra)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, extra) for v in value]
    return value


def secret_values() -> list[str]:
    """Secret strings that must never appear in a log line, longest first."""
    values = [os.environ.get(name, "") for name in _ENV_SECRETS]
    values += url_passwords(os.environ.get("REDIS_URL", ""))
    values += os.environ.get("CALLGATE_REDACT_VALUES", "").split(",")
    return sorted({v for v in values if len(v) >= 6}, key=len, reverse=True)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service
        self.secrets = secret_values()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update(redact(fields))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        line = mask_url_password(orjson.dumps(entry, default=str).decode())
        for secret in self.secrets:
            line = line.replace(secret, MASK)
        return line


def setup_logging(service: str, level: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("CALLGATE_LOG_LEVEL", "INFO"))
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "arq"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_fields(**fields: Any) -> dict[str, Any]:
    """``logger.info("msg", extra=log_fields(run_id=..., call_id=...))``."""
    return {"fields": fields}
