"""``CALLGATE_CONSOLE_*``: who the local login link is for, and how long links and sessions
live."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ConsoleSettings(BaseSettings):
    """The web console's own settings (it is served by `callgate serve`)."""

    model_config = SettingsConfigDict(env_prefix="CALLGATE_CONSOLE_", frozen=True, extra="ignore")

    operator: str | None = Field(
        default=None,
        description="The trust-file person `callgate serve` prints a one-time login link for "
        "(`callgate dev`: carol, the demo's approver); unset: no link, people sign in with a "
        "bearer token (their own key's or their identity provider's).",
    )
    secret: SecretStr | None = Field(
        default=None,
        description="The key session cookies are signed with; unset: a random one per "
        "process (sessions end when the server restarts; replicas need a shared one).",
    )
    login_ttl_s: float = Field(
        default=300.0, gt=0, le=3600, description="How long the one-time login link stays valid."
    )
    session_ttl_s: float = Field(
        default=8 * 3600.0, gt=0, le=7 * 24 * 3600, description="How long a console session lasts."
    )
