"""Pure Slack message builders and the button value codec: no I/O, no clock.

The Approve/Deny buttons carry the ids of the approval they decide in their ``value``
(Slack echoes it back, signed, in the click), so a click never depends on bot memory.  The
role a click needs is *not* taken from the button: the bot reads it from the approval
record, which only the validator writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from callgate.envelopes import ApprovalRequested, OutcomeUnknown
from callgate.redact import redact

APPROVE_ACTION = "callgate_approve"
DENY_ACTION = "callgate_deny"
ACTIONS_BLOCK = "callgate_approval"
MAX_ARGS_CHARS = 2500
"""Slack caps a section's text at 3,000 characters; the arguments are cut before that."""


class Notification(BaseModel):
    """One message on a ``notify`` stream (field ``d``, JSON), written by validator/reconciler."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: Literal["approval_requested", "unknown_outcome"]
    run_id: str = Field(min_length=1, max_length=128)
    approval_id: str | None = Field(default=None, max_length=128)
    call_id: str | None = Field(default=None, max_length=128)
    turn: int | None = None
    tool: str | None = None
    args_hash: str | None = Field(default=None, max_length=128)
    arguments: Any = None
    """Already redacted by the writer; redacted again here before posting."""
    approver_role: str | None = None
    expires_ms: int | None = None
    requested_by: str | None = None
    """Optional: when absent the bot reads ``requested_by`` from the approval record."""
    detail: str | None = None

    @classmethod
    def of(cls, message: ApprovalRequested | OutcomeUnknown) -> Notification:
        """The view of a notify envelope the message builders use."""
        if isinstance(message, ApprovalRequested):
            return cls(type="approval_requested", run_id=message.run_id, turn=message.turn,
                       call_id=message.call_id, approval_id=message.approval_id,
                       tool=message.tool, args_hash=message.args_hash,
                       arguments=message.arguments, approver_role=message.approver_role,
                       expires_ms=message.expires_ms, requested_by=message.requested_by)
        return cls(type="unknown_outcome", run_id=message.run_id, turn=message.turn,
                   call_id=message.call_id, tool=message.tool, detail=message.detail)

    @model_validator(mode="after")
    def _approval_ids(self) -> Notification:
        if self.type == "approval_requested" and not (
            self.approval_id and self.call_id and self.args_hash
        ):
            raise ValueError("approval_requested needs approval_id, call_id and args_hash")
        return self


class ButtonValue(BaseModel):
    """What an Approve/Deny button carries; Slack returns it unchanged in the signed click."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(min_length=1, max_length=128)
    approval_id: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    args_hash: str = Field(min_length=1, max_length=128)

    def to_value(self) -> str:
        return orjson.dumps(self.model_dump()).decode()

    @classmethod
    def from_value(cls, value: str) -> ButtonValue | None:
        """The parsed value, or None when it is not one of ours."""
        try:
            return cls.model_validate(orjson.loads(value))
        except (orjson.JSONDecodeError, ValidationError):
            return None


def _slack_date(ms: int) -> str:
    """Slack renders this in the reader's time zone; the fallback is UTC."""
    seconds = ms // 1000
    iso = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{seconds}^{{date_short_pretty}} {{time}}|{iso}>"


def _arguments_text(arguments: Any) -> str:
    text = orjson.dumps(redact(arguments), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    shown = text.decode()
    if len(shown) > MAX_ARGS_CHARS:
        shown = f"{shown[:MAX_ARGS_CHARS]}\n…(cut)"
    return f"```{shown}```"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _button(action_id: str, label: str, style: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,
    }


def approval_text(note: Notification) -> str:
    """The plain-text fallback (notifications, screen readers)."""
    return f"Approval needed: {note.tool or 'tool call'} (run {note.run_id})"


def approval_blocks(note: Notification, requested_by: str | None) -> list[dict[str, Any]]:
    """The request message: what would run, for whom, who may decide, until when; two buttons."""
    assert note.approval_id and note.call_id and note.args_hash
    value = ButtonValue(
        run_id=note.run_id, approval_id=note.approval_id,
        call_id=note.call_id, args_hash=note.args_hash,
    ).to_value()
    expires = _slack_date(note.expires_ms) if note.expires_ms else "never"
    fields = [
        f"*Requested by:*\n{requested_by or 'unknown'}",
        f"*Approver role:*\n{note.approver_role or 'any approver'}",
        f"*Expires:*\n{expires}",
        f"*Run / call:*\n`{note.run_id}` / `{note.call_id}`",
    ]
    return [
        _section(f":lock: *Approval needed* for `{note.tool or 'unknown tool'}`"),
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
        _section(_arguments_text(note.arguments)),
        _context(f"arguments hash `{note.args_hash}` · approval `{note.approval_id}`"),
        {
            "type": "actions",
            "block_id": ACTIONS_BLOCK,
            "elements": [
                _button(APPROVE_ACTION, "Approve", "primary", value),
                _button(DENY_ACTION, "Deny", "danger", value),
            ],
        },
    ]


def outcome_text(decision: Literal["approve", "deny"], user: str, reason: str | None) -> str:
    if decision == "approve":
        return f"approved by {user}"
    return f"denied by {user}: {reason}" if reason else f"denied by {user}"


def decided_blocks(
    original: list[dict[str, Any]] | None, outcome: str, slack_user_id: str
) -> list[dict[str, Any]]:
    """The request message without its buttons, plus who decided (so nobody clicks again)."""
    kept = [b for b in original or [] if b.get("type") != "actions"]
    icon = ":white_check_mark:" if outcome.startswith("approved") else ":no_entry:"
    return [
        *kept,
        _section(f"{icon} *{outcome}* (<@{slack_user_id}>)"),
        _context("Decision sent to callgate, which applies it only if the approval is still live."),
    ]


def unknown_outcome_text(note: Notification) -> str:
    return f"write outcome unknown; run paused ({note.tool or 'tool call'}, run {note.run_id})"


def unknown_outcome_blocks(note: Notification) -> list[dict[str, Any]]:
    """No buttons: the reconciler, not a human click, resolves an unknown outcome."""
    lines = [
        ":warning: *write outcome unknown; run paused*",
        f"*Tool:* `{note.tool or 'unknown'}`",
        f"*Run / call:* `{note.run_id}` / `{note.call_id or '-'}`",
    ]
    if note.detail:
        lines.append(f"*Detail:* {note.detail[:1000]}")
    return [_section("\n".join(lines))]
