"""Pure Slack message builders and the button value codec: no I/O, no clock.

The Approve/Deny buttons carry the ids of the approval they decide in their ``value``
(Slack echoes it back, signed, in the click), so a click never depends on bot memory.  The
role a click needs is *not* taken from the button: the bot reads it from the approval
record, which only the validator writes.

Every value that is not a constant of ours (tool names, arguments, reasons, ids, who asked) is
model- or user-chosen, so it reaches Slack escaped (``&``, ``<``, ``>``): otherwise a value such
as ``<!channel>`` pings everyone and ``<https://evil|Approve here>`` is a link on an approval
card.  The arguments are shown as ``plain_text``, which Slack never interprets, not inside a
code fence a value could close (escaped too: Slack decodes the three entities in every text
object); mrkdwn objects are ``verbatim`` so bare URLs and names in a value are not turned into
links or mentions either.
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
MAX_INLINE_CHARS = 200
"""A name or id shown in a line; Slack caps a field at 2,000 characters."""
MAX_DETAIL_CHARS = 1000


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


def escape(text: str) -> str:
    """``text`` with Slack's three control characters escaped, so it is shown, never parsed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escaped_prefix(text: str, limit: int) -> str:
    """``text`` escaped and cut to at most ``limit`` characters without splitting an entity
    (escaping can make a text five times longer, past Slack's limits)."""
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    out: list[str] = []
    size = 0
    for char in text:
        piece = escape(char)
        if size + len(piece) > limit:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + "…(cut)"


def _inline(value: str | None, default: str, limit: int = MAX_INLINE_CHARS) -> str:
    """``value`` escaped on one line: a line break in it could fake one of our labelled lines."""
    shown = (value or default).replace("\r", " ").replace("\n", " ")
    return _escaped_prefix(shown, limit)


def _code(value: str | None, default: str) -> str:
    """``value`` as inline code; a backtick in it would end the code span early."""
    shown = (value or default).replace("`", "'")
    return f"`{_inline(shown, default)}`"


def _arguments_text(arguments: Any) -> str:
    text = orjson.dumps(redact(arguments), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    return _escaped_prefix(text.decode(), MAX_ARGS_CHARS)


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _plain_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "plain_text", "text": text, "emoji": False}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [_mrkdwn(text)]}


def _button(action_id: str, label: str, style: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,
    }


def approval_text(note: Notification) -> str:
    """The fallback text (notifications, screen readers); Slack formats it, so it is escaped."""
    return f"Approval needed: {_inline(note.tool, 'tool call')} (run {_inline(note.run_id, '-')})"


def approval_blocks(note: Notification, requested_by: str | None) -> list[dict[str, Any]]:
    """The request message: what would run, for whom, who may decide, until when; two buttons."""
    assert note.approval_id and note.call_id and note.args_hash
    value = ButtonValue(
        run_id=note.run_id, approval_id=note.approval_id,
        call_id=note.call_id, args_hash=note.args_hash,
    ).to_value()
    expires = _slack_date(note.expires_ms) if note.expires_ms else "never"
    fields = [
        f"*Requested by:*\n{_inline(requested_by, 'unknown')}",
        f"*Approver role:*\n{_inline(note.approver_role, 'any approver')}",
        f"*Expires:*\n{expires}",
        f"*Run / call:*\n{_code(note.run_id, '-')} / {_code(note.call_id, '-')}",
    ]
    return [
        _section(f":lock: *Approval needed* for {_code(note.tool, 'unknown tool')}"),
        {"type": "section", "fields": [_mrkdwn(f) for f in fields]},
        _section("*Arguments* (secrets redacted, long values cut):"),
        _plain_section(_arguments_text(note.arguments)),
        _context(f"arguments hash {_code(note.args_hash, '-')} · "
                 f"approval {_code(note.approval_id, '-')}"),
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
    """Who decided, already escaped: it is the update's fallback text and a mrkdwn line."""
    who = _inline(user, "unknown")
    if decision == "approve":
        return f"approved by {who}"
    return f"denied by {who}: {_inline(reason, '', MAX_DETAIL_CHARS)}" if reason else (
        f"denied by {who}")


def decided_blocks(
    original: list[dict[str, Any]] | None, outcome: str, slack_user_id: str
) -> list[dict[str, Any]]:
    """The request message without its buttons, plus who decided (so nobody clicks again).

    ``outcome`` is `outcome_text`'s, already escaped; the Slack user id came in Slack's signed
    click and is escaped all the same."""
    kept = [b for b in original or [] if b.get("type") != "actions"]
    icon = ":white_check_mark:" if outcome.startswith("approved") else ":no_entry:"
    return [
        *kept,
        _section(f"{icon} *{outcome}* (<@{escape(slack_user_id)}>)"),
        _context("Decision sent to callgate, which applies it only if the approval is still live."),
    ]


def unknown_outcome_text(note: Notification) -> str:
    return (f"write outcome unknown; run paused ({_inline(note.tool, 'tool call')}, "
            f"run {_inline(note.run_id, '-')})")


def unknown_outcome_blocks(note: Notification) -> list[dict[str, Any]]:
    """No buttons: the reconciler, not a human click, resolves an unknown outcome."""
    lines = [
        ":warning: *write outcome unknown; run paused*",
        f"*Tool:* {_code(note.tool, 'unknown')}",
        f"*Run / call:* {_code(note.run_id, '-')} / {_code(note.call_id, '-')}",
    ]
    blocks = [_section("\n".join(lines))]
    if note.detail:
        blocks += [_section("*Detail:*"),
                   _plain_section(_escaped_prefix(note.detail, MAX_DETAIL_CHARS))]
    return blocks
