"""Configuration of the Slack approvals bot: one `SlackSettings`, read from CALLGATE_SLACK_*.

Secrets are `SecretStr`, so a settings object printed or logged never shows them; the bot
refuses to start without a signing secret, because Bolt would otherwise have nothing to
verify a click against.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Approver(BaseModel):
    """The callgate identity a Slack user acts as, and the approver roles they hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str = Field(min_length=1, max_length=256)
    """callgate user name recorded as the decision's ``approver`` (e.g. ``carol``)."""
    roles: frozenset[str] = frozenset()
    """Approver roles (an approval request names the one it needs; who may resolve an unknown
    outcome is checked by the validator against the trust file)."""


class SlackSettings(BaseSettings):
    """Every setting of the Slack bot; each can be set as ``CALLGATE_SLACK_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="CALLGATE_SLACK_", frozen=True, extra="ignore")

    api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL (tests: the fake)."
    )
    bot_token: SecretStr = Field(default=SecretStr(""), description="xoxb-… bot token.")
    signing_secret: SecretStr = Field(
        default=SecretStr(""), description="Verifies that a request came from Slack."
    )
    channel: str = Field(default="", description="Channel id approval requests are posted to.")
    team_id: str | None = Field(
        default=None, description="If set, clicks from any other workspace are refused."
    )
    approvers: dict[str, Approver] = Field(
        default_factory=dict,
        description='JSON {"U123": {"user": "carol", "roles": ["events-lead"]}}.',
    )
    group: str = Field(default="slack_approvals", description="Consumer group on notify streams.")
    key_id: str = Field(
        default="slack",
        description="The bot's own signing key (a delegate in the trust file that may sign "
        "for the people the approvers map names); HOME/keys/<key_id>.pem.",
    )
    api_timeout_s: int = Field(default=10, ge=1, description="Per Slack Web API request.")
    verdict_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="How long the bot watches a run's events for callgate's verdict on a "
        "resolution clicked in Slack, to show it.",
    )

    def check(self) -> None:
        """Raise ValueError naming every setting the bot cannot run without."""
        missing = [
            name
            for name, value in (
                ("CALLGATE_SLACK_BOT_TOKEN", self.bot_token.get_secret_value()),
                ("CALLGATE_SLACK_SIGNING_SECRET", self.signing_secret.get_secret_value()),
                ("CALLGATE_SLACK_CHANNEL", self.channel),
            )
            if not value.strip()
        ]
        if missing:
            raise ValueError(f"missing required settings: {', '.join(missing)}")
