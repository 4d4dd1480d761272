"""Structured, redacted process logs: one JSON object per line on stderr.

Redaction happens in the formatter, so no call site can forget it: values of secret-looking
keys are replaced, and every configured secret value (API keys from the environment, planted
test secrets) is masked wherever it appears in the rendered line.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

SECRET_KEY_PARTS = ("api_key", "apikey", "authorization", "secret", "password", "token", "cookie")
_ENV_SECRETS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "CALLGATE_SLACK_SIGNING_SECRET",
    "CALLGATE_SLACK_BOT_TOKEN",
)
MASK = "[redacted]"


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
        line = orjson.dumps(entry, default=str).decode()
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
