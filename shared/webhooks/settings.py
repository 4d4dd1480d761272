"""Where webhooks go: the deployment's endpoints, and how hard a delivery is tried.

The endpoints are the deployment's to name, like the trust file: a JSON file
(``CALLGATE_WEBHOOK_ENDPOINTS_FILE``) or the same list inline (``CALLGATE_WEBHOOK_ENDPOINTS``)::

    [{"name": "ops", "url": "https://ops.example.com/hooks/callgate",
      "secret_env": "OPS_WEBHOOK_SECRET", "events": ["run.paused", "approval.requested"]}]

A secret is given inline (``secret``) or, better, named by the environment variable holding it
(``secret_env``).  Nothing in a run or a message can add an endpoint or change where one points.
A file that does not load is one line (`WebhookConfigError`), never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from callgate.errors import CallgateError

EventType = Literal["run.paused", "run.finished", "approval.requested", "outcome.unknown"]
EVENT_TYPES: tuple[EventType, ...] = (
    "run.paused",
    "run.finished",
    "approval.requested",
    "outcome.unknown",
)
SECRET_MIN = 16
"""Bytes of secret below which an HMAC is guessable by whoever sees a few deliveries."""


class WebhookConfigError(CallgateError):
    """The deployment's webhook endpoints do not load (file, JSON, or a field)."""


class Endpoint(BaseModel):
    """One receiver the deployment registered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """Its name in delivery ids, dead letters and metrics."""
    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048)
    secret: SecretStr = Field(default=SecretStr(""), exclude=True)
    """The shared HMAC secret, inline (prefer ``secret_env``)."""
    secret_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    """The environment variable that holds the secret."""
    events: frozenset[EventType] = frozenset(EVENT_TYPES)
    """The events it receives (default: all)."""

    @field_validator("events")
    @classmethod
    def _some(cls, events: frozenset[EventType]) -> frozenset[EventType]:
        if not events:
            raise ValueError("an endpoint receives at least one event")
        return events

    def key(self) -> bytes:
        """The secret, from the environment when ``secret_env`` names it."""
        value = self.secret.get_secret_value()
        if self.secret_env is not None:
            value = os.environ.get(self.secret_env, "")
        return value.encode()


class WebhookSettings(BaseSettings):
    """The webhooks worker's settings; each can be set as ``CALLGATE_WEBHOOK_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="CALLGATE_WEBHOOK_", frozen=True, extra="ignore")

    endpoints_file: Path | None = Field(default=None, description="JSON list of endpoints.")
    endpoints: str = Field(default="", description="The same list inline, as JSON.")
    retry_schedule_s: tuple[float, ...] = Field(
        default=(1.0, 5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0),
        min_length=1,
        max_length=20,
        description="Delay before each retry of a failed delivery; after the last → dead letter.",
    )
    timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=8.0,
        description="One delivery's HTTP timeout (below the 10 s an arq job may run).",
    )
    max_age_s: float = Field(
        default=86_400.0,
        gt=0,
        description="Events older than this when the worker reads them are not delivered.",
    )
    follow_batch: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Runs whose event logs one follow pass reads per partition.",
    )

    def load(self) -> tuple[Endpoint, ...]:
        """The registered endpoints, or `WebhookConfigError` with one line saying why."""
        raw = self.endpoints
        where = "CALLGATE_WEBHOOK_ENDPOINTS"
        if self.endpoints_file is not None:
            where = str(self.endpoints_file)
            try:
                raw = self.endpoints_file.read_text()
            except OSError as exc:
                raise WebhookConfigError(
                    f"webhook endpoints: cannot read {where}: {exc.strerror}"
                ) from None
        return parse_endpoints(raw, where)


def parse_endpoints(raw: str, where: str) -> tuple[Endpoint, ...]:
    """Endpoints from their JSON list (empty text: none)."""
    if not raw.strip():
        return ()
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise WebhookConfigError(f"webhook endpoints: {where} is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise WebhookConfigError(f"webhook endpoints: {where} must hold a JSON list")
    try:
        endpoints = tuple(Endpoint.model_validate(item) for item in items)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "entry"
        raise WebhookConfigError(f"webhook endpoints: {where}: {field}: {first['msg']}") from None
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise WebhookConfigError(f"webhook endpoints: {where}: names must be unique")
    for endpoint in endpoints:
        if len(endpoint.key()) < SECRET_MIN:
            source = endpoint.secret_env or "secret"
            raise WebhookConfigError(
                f"webhook endpoints: {where}: {endpoint.name}: the secret "
                f"({source}) needs at least {SECRET_MIN} bytes"
            )
    return endpoints
