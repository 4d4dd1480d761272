"""What `callgate serve` needs beyond the deployment's `Settings`: where to listen, and the
delegate key it signs people's decisions with."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    """``CALLGATE_API_*``: the HTTP API's own settings."""

    model_config = SettingsConfigDict(env_prefix="CALLGATE_API_", frozen=True, extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    delegate: str = Field(
        default="api",
        description="The key id of the server's `delegates` entry: it signs the decisions "
        "people post through the API, only for the people its ``signs_for`` lists.",
    )
    delegate_key: Path | None = Field(
        default=None, description="The delegate's private key; default: HOME/keys/<delegate>.pem."
    )
    verdict_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="How long an action waits for the validator's verdict before answering "
        "202 (posted, no verdict yet).",
    )
    sse_block_ms: int = Field(
        default=15_000,
        ge=10,
        le=60_000,
        description="Longest wait for a run's next event before an SSE keep-alive comment.",
    )
    max_page: int = Field(default=200, ge=1, le=1000, description="Most runs one page lists.")
