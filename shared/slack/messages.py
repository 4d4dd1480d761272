"""Pure Slack message builders and the button value codec: no I/O, no clock.

The Approve/Deny buttons carry the ids of the approval they decide in their ``value``
(Slack echoes it back, signed, in the click), so a click never depends on bot memory.  The
role a click needs is *not* taken from the button: the bot reads it from the approval
record, which only the validator writes.  The Applied / Not applied / Recheck buttons of an
unknown outcome carry the call and the operation id the person was shown (`ResolveValue`); a
resolution is bound to that operation id, and the validator decides who may resolve.

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
from typing import Any, Literal, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from callgate.decisions.claims import ResolveOutcome
from callgate.envelopes import ApprovalRequested, OutcomeUnknown
from callgate.redact import redact

APPROVE_ACTION = "callgate_approve"
DENY_ACTION = "callgate_deny"
ACTIONS_BLOCK = "callgate_approval"
RESOLVE_ACTIONS: dict[str, ResolveOutcome] = {
    "callgate_resolve_applied": "applied",
    "callgate_resolve_not_applied": "not_applied",
    "callgate_resolve_recheck": "recheck",
}
"""Action id of each button on an unknown-outcome message → the resolution it posts."""
RESOLVE_BLOCK = "callgate_resolve"
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
    operation_id: str | None = Field(default=None, max_length=256)
    """The unknown write's operation id: what a resolution is bound to."""

    @classmethod
    def of(cls, message: ApprovalRequested | OutcomeUnknown) -> Notification:
        """The view of a notify envelope the message builders use."""
        if isinstance(message, ApprovalRequested):
            return cls(
                type="approval_requested",
                run_id=message.run_id,
                turn=message.turn,
                call_id=message.call_id,
                approval_id=message.approval_id,
                tool=message.tool,
                args_hash=message.args_hash,
                arguments=message.arguments,
                approver_role=message.approver_role,
                expires_ms=message.expires_ms,
                requested_by=message.requested_by,
            )
        return cls(
            type="unknown_outcome",
            run_id=message.run_id,
            turn=message.turn,
            call_id=message.call_id,
            tool=message.tool,
            detail=message.detail,
            operation_id=message.operation_id,
        )

    @model_validator(mode="after")
    def _approval_ids(self) -> Notification:
        if self.type == "approval_requested" and not (
            self.approval_id and self.call_id and self.args_hash
        ):
            raise ValueError("approval_requested needs approval_id, call_id and args_hash")
        return self


class _ButtonPayload(BaseModel):
    """A button's value: JSON that Slack returns unchanged in the signed click."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_value(self) -> str:
        return orjson.dumps(self.model_dump()).decode()

    @classmethod
    def from_value(cls, value: str) -> Self | None:
        """The parsed value, or None when it is not one of ours."""
        try:
            return cls.model_validate(orjson.loads(value))
        except (orjson.JSONDecodeError, ValidationError):
            return None


class ButtonValue(_ButtonPayload):
    """What an Approve/Deny button carries."""

    run_id: str = Field(min_length=1, max_length=128)
    approval_id: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    args_hash: str = Field(min_length=1, max_length=128)


class ResolveValue(_ButtonPayload):
    """What an Applied / Not applied / Recheck button carries (the outcome is its action id):
    the call and the operation id the person was shown, which the resolution is bound to.
    At most ~530 characters of JSON, well under Slack's 2,000."""

    run_id: str = Field(min_length=1, max_length=128)
    call_id: str = Field(min_length=1, max_length=128)
    op: str = Field(min_length=1, max_length=256)


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


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": False}


def _button(
    action_id: str,
    label: str,
    style: str | None,
    value: str,
    confirm: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A button; ``confirm`` (title, text: constants of ours) asks "are you sure?" first."""
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "value": value,
    }
    if style is not None:
        button["style"] = style
    if confirm is not None:
        title, text = confirm
        button["confirm"] = {
            "title": _plain(title),
            "text": _plain(text),
            "confirm": _plain("Yes, record it"),
            "deny": _plain("Cancel"),
        }
    return button


def approval_text(note: Notification) -> str:
    """The fallback text (notifications, screen readers); Slack formats it, so it is escaped."""
    return f"Approval needed: {_inline(note.tool, 'tool call')} (run {_inline(note.run_id, '-')})"


def approval_blocks(note: Notification, requested_by: str | None) -> list[dict[str, Any]]:
    """The request message: what would run, for whom, who may decide, until when; two buttons."""
    assert note.approval_id and note.call_id and note.args_hash
    value = ButtonValue(
        run_id=note.run_id,
        approval_id=note.approval_id,
        call_id=note.call_id,
        args_hash=note.args_hash,
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
        _context(
            f"arguments hash {_code(note.args_hash, '-')} · approval {_code(note.approval_id, '-')}"
        ),
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
    return (
        f"denied by {who}: {_inline(reason, '', MAX_DETAIL_CHARS)}"
        if reason
        else (f"denied by {who}")
    )


def _without_buttons(original: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [b for b in original or [] if b.get("type") != "actions"]


def decided_blocks(
    original: list[dict[str, Any]] | None, outcome: str, slack_user_id: str
) -> list[dict[str, Any]]:
    """The request message without its buttons, plus who decided (so nobody clicks again).

    ``outcome`` is `outcome_text`'s, already escaped; the Slack user id came in Slack's signed
    click and is escaped all the same."""
    icon = ":white_check_mark:" if outcome.startswith("approved") else ":no_entry:"
    return [
        *_without_buttons(original),
        _section(f"{icon} *{outcome}* (<@{escape(slack_user_id)}>)"),
        _context("Decision sent to callgate, which applies it only if the approval is still live."),
    ]


def unknown_outcome_text(note: Notification) -> str:
    return (
        f"write outcome unknown; run paused ({_inline(note.tool, 'tool call')}, "
        f"run {_inline(note.run_id, '-')})"
    )


APPLIED_CONFIRM = (
    "Record: applied?",
    "Only if the target system shows the write took effect. Slack carries no result: the model "
    "is told it succeeded with an empty result. To give it the real result, use `callgate "
    "resolve --applied --result …` instead.",
)
NOT_APPLIED_CONFIRM = (
    "Record: not applied?",
    "Only if the target system shows the write did not happen. The model is told so; callgate "
    "never retries it.",
)


def unknown_outcome_blocks(note: Notification) -> list[dict[str, Any]]:
    """What is unknown, and three buttons that resolve it as `callgate resolve` does (when
    the notification names the call's operation id, which a resolution is bound to)."""
    lines = [
        ":warning: *write outcome unknown; run paused*",
        f"*Tool:* {_code(note.tool, 'unknown')}",
        f"*Run / call:* {_code(note.run_id, '-')} / {_code(note.call_id, '-')}",
        f"*Operation:* {_code(note.operation_id, '-')}",
    ]
    blocks = [_section("\n".join(lines))]
    if note.detail:
        blocks += [
            _section("*Detail:*"),
            _plain_section(_escaped_prefix(note.detail, MAX_DETAIL_CHARS)),
        ]
    if not (note.call_id and note.operation_id):
        return blocks
    value = ResolveValue(run_id=note.run_id, call_id=note.call_id, op=note.operation_id)
    applied, not_applied, recheck = RESOLVE_ACTIONS
    blocks += [
        _context("Check the target system, then say what happened; recheck asks it again."),
        {
            "type": "actions",
            "block_id": RESOLVE_BLOCK,
            "elements": [
                _button(applied, "Applied", "primary", value.to_value(), APPLIED_CONFIRM),
                _button(
                    not_applied, "Not applied", "danger", value.to_value(), NOT_APPLIED_CONFIRM
                ),
                _button(recheck, "Recheck", None, value.to_value()),
            ],
        },
    ]
    return blocks


RESOLVED_SAID: dict[ResolveOutcome, tuple[str, str]] = {
    "applied": ("applied, confirmed by", "callgate told the model it succeeded (empty result)."),
    "not_applied": ("not applied, confirmed by", "callgate told the model it did not happen."),
    "recheck": (
        "recheck asked by",
        "callgate asks the target system again; if it still "
        "cannot tell, resolve it here once more.",
    ),
}


def resolved_text(outcome: ResolveOutcome, person: str) -> str:
    """The verdict line, already escaped: the update's fallback text and a mrkdwn line."""
    return f"{RESOLVED_SAID[outcome][0]} {_inline(person, 'unknown')}"


def resolved_blocks(
    original: list[dict[str, Any]] | None, outcome: ResolveOutcome, person: str, slack_user_id: str
) -> list[dict[str, Any]]:
    """The unknown-outcome message once callgate applied a click's resolution.  Applied / not
    applied: no buttons.  Recheck: the buttons stay, above them who asked, because the target
    system may still not tell (the call is then unresolved again, without a new message)."""
    icon = ":arrows_counterclockwise:" if outcome == "recheck" else ":white_check_mark:"
    said = [
        _section(f"{icon} *{resolved_text(outcome, person)}* (<@{escape(slack_user_id)}>)"),
        _context(RESOLVED_SAID[outcome][1]),
    ]
    if outcome != "recheck":
        return [*_without_buttons(original), *said]
    blocks = list(original or [])
    at = next((i for i, b in enumerate(blocks) if b.get("type") == "actions"), len(blocks))
    return [*blocks[:at], *said, *blocks[at:]]
