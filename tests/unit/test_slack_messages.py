"""Pure parts of the Slack bot: message limits, redaction, the button codec, click checks."""

from __future__ import annotations

from typing import Any

import orjson

from callgate.slack.clicks import Click, authorize
from callgate.slack.messages import (
    ButtonValue,
    Notification,
    approval_blocks,
    approval_text,
    decided_blocks,
    outcome_text,
    unknown_outcome_blocks,
    unknown_outcome_text,
)
from callgate.slack.records import ApprovalView
from callgate.slack.settings import Approver

NOTE = Notification(
    type="approval_requested",
    run_id="r" * 128,
    approval_id="a" * 128,
    call_id="c" * 128,
    tool="wire_money",
    args_hash="h" * 128,
    approver_role="finance",
    expires_ms=1_800_000_000_000,
    arguments={"memo": "x" * 10_000, "password": "hunter2-secret", "amount": 5},
)


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    out = [b["text"]["text"] for b in blocks if "text" in b]
    out += [f["text"] for b in blocks for f in b.get("fields", [])]
    return out


def test_request_message_fits_slack_limits_and_hides_secrets() -> None:
    blocks = approval_blocks(NOTE, "alice")
    assert all(len(text) <= 3000 for text in _texts(blocks))
    buttons = blocks[-1]["elements"]
    assert all(len(b["value"]) <= 2000 for b in buttons)
    assert "hunter2-secret" not in orjson.dumps(blocks).decode()
    assert ButtonValue.from_value(buttons[0]["value"]) == ButtonValue(
        run_id=NOTE.run_id, approval_id="a" * 128, call_id="c" * 128, args_hash="h" * 128
    )


def test_button_value_rejects_anything_not_ours() -> None:
    assert ButtonValue.from_value("not json") is None
    assert ButtonValue.from_value('{"run_id": "r"}') is None


def test_authorize_checks_identity_before_the_record() -> None:
    value = ButtonValue(run_id="r", approval_id="a", call_id="c", args_hash="h")
    click = Click("U1", "T1", "approve", value, "C1", "1.0", None)
    record = ApprovalView(
        approval_id="a",
        run_id="r",
        turn=1,
        call_id="c",
        args_hash="h",
        approver_role="finance",
        expires_ms=2_000,
        state="pending",
    )
    carol = Approver(user="carol", roles=frozenset({"finance"}))
    assert authorize(click, carol, record, team_id="T1", now_ms=1_000) is None
    assert authorize(click, carol, record, team_id="T2", now_ms=1_000) is not None
    assert "not a callgate approver" in (
        authorize(click, None, record, team_id=None, now_ms=1_000) or ""
    )
    assert "expired" in (authorize(click, carol, record, team_id=None, now_ms=2_000) or "")
    other_call = record.model_copy(update={"call_id": "c2"})
    assert "does not match" in (
        authorize(click, carol, other_call, team_id=None, now_ms=1_000) or ""
    )


ATTACKS = ("<!channel>", "<https://evil.example|Approve here>", "```")
"""What a model puts in a value to ping everyone, show a fake link, or close our code block."""

HOSTILE = Notification(
    type="approval_requested",
    run_id="run-1<!here>",
    approval_id="apr-1",
    call_id="call-1",
    tool="wire_money`<!channel>",
    args_hash="sha256:abc",
    approver_role="finance<!channel>",
    expires_ms=1_800_000_000_000,
    requested_by="mallory <https://evil.example|carol>",
    arguments={
        "memo": "```\n<!channel> <https://evil.example|Approve here> & more ```",
        "reason": "urgent: <!channel> click <https://evil.example|Approve here>",
    },
)


def _text_objects(value: Any) -> list[dict[str, Any]]:
    """Every Slack text object anywhere in ``value`` (sections, fields, context, buttons)."""
    if isinstance(value, list):
        return [obj for item in value for obj in _text_objects(item)]
    if not isinstance(value, dict):
        return []
    found = [value] if value.get("type") in ("mrkdwn", "plain_text") else []
    return found + [obj for item in value.values() for obj in _text_objects(item)]


def _mrkdwn(blocks: list[dict[str, Any]]) -> list[str]:
    return [obj["text"] for obj in _text_objects(blocks) if obj["type"] == "mrkdwn"]


def _assert_inert(mrkdwn: list[str]) -> None:
    for text in mrkdwn:
        assert "<!channel>" not in text and "<!here>" not in text, text
        assert "<http" not in text, text


def test_hostile_approval_values_reach_no_mrkdwn_unescaped() -> None:
    blocks = approval_blocks(HOSTILE, HOSTILE.requested_by)
    mrkdwn = _mrkdwn(blocks)
    _assert_inert(mrkdwn)
    assert not any("```" in text for text in mrkdwn), "no code fence a value could close"
    assert all(
        obj.get("verbatim") is True for obj in _text_objects(blocks) if obj["type"] == "mrkdwn"
    ), "bare URLs in values must not be linkified"
    assert any("&lt;!channel&gt;" in text for text in mrkdwn), "shown, escaped, not dropped"
    assert "<" not in approval_text(HOSTILE), "the fallback text is mrkdwn too"


def test_hostile_arguments_are_plain_text_and_escaped() -> None:
    blocks = approval_blocks(HOSTILE, None)
    plain = [
        obj["text"]
        for obj in _text_objects(blocks)
        if obj["type"] == "plain_text" and "memo" in obj["text"]
    ]
    assert len(plain) == 1, "the arguments are one plain_text object"
    (shown,) = plain
    assert "&lt;https://evil.example|Approve here&gt;" in shown
    assert "&lt;!channel&gt;" in shown and "&amp; more" in shown
    assert "<" not in shown and not any("memo" in text for text in _mrkdwn(blocks))


def test_escaping_never_passes_slack_limits_or_splits_an_entity() -> None:
    note = HOSTILE.model_copy(update={"arguments": {"memo": "<" * 10_000}, "tool": "<" * 5_000})
    blocks = approval_blocks(note, "&" * 5_000)
    assert all(len(obj["text"]) <= 2000 for b in blocks for obj in b.get("fields", []))
    assert all(len(obj["text"]) <= 3000 for obj in _text_objects(blocks))
    for obj in _text_objects(blocks):
        cut = obj["text"].removesuffix("…(cut)").removesuffix("…(cut)`")
        assert not cut.endswith(("&", "&l", "&lt", "&a", "&am", "&amp", "&g", "&gt")), obj


def test_hostile_buttons_still_round_trip() -> None:
    blocks = approval_blocks(HOSTILE, None)
    for button in blocks[-1]["elements"]:
        assert ButtonValue.from_value(button["value"]) == ButtonValue(
            run_id="run-1<!here>", approval_id="apr-1", call_id="call-1", args_hash="sha256:abc"
        )


def test_hostile_reason_detail_and_decider_are_escaped() -> None:
    reason = "<!channel> see <https://evil.example|Approve here> ```"
    outcome = outcome_text("deny", "carol<!here>", reason)
    assert "<" not in outcome
    original = approval_blocks(HOSTILE, None)
    _assert_inert(_mrkdwn(decided_blocks(original, outcome, "U1>")))
    note = Notification(
        type="unknown_outcome",
        run_id="r<!channel>",
        call_id="c",
        tool="t<https://evil.example|x>",
        detail=reason,
    )
    blocks = unknown_outcome_blocks(note)
    _assert_inert(_mrkdwn(blocks))
    assert any(
        "&lt;!channel&gt; see" in obj["text"]
        for obj in _text_objects(blocks)
        if obj["type"] == "plain_text"
    ), "the detail is plain_text"
    assert "<" not in unknown_outcome_text(note)
