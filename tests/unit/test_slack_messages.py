"""Pure parts of the Slack bot: message limits, redaction, the button codec, click checks."""

from __future__ import annotations

from typing import Any

import orjson

from callgate.slack.clicks import Click, authorize
from callgate.slack.messages import ButtonValue, Notification, approval_blocks
from callgate.slack.records import ApprovalView
from callgate.slack.settings import Approver

NOTE = Notification(
    type="approval_requested", run_id="r" * 128, approval_id="a" * 128, call_id="c" * 128,
    tool="wire_money", args_hash="h" * 128, approver_role="finance", expires_ms=1_800_000_000_000,
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
        run_id=NOTE.run_id, approval_id="a" * 128, call_id="c" * 128, args_hash="h" * 128)


def test_button_value_rejects_anything_not_ours() -> None:
    assert ButtonValue.from_value("not json") is None
    assert ButtonValue.from_value('{"run_id": "r"}') is None


def test_authorize_checks_identity_before_the_record() -> None:
    value = ButtonValue(run_id="r", approval_id="a", call_id="c", args_hash="h")
    click = Click("U1", "T1", "approve", value, "C1", "1.0", None)
    record = ApprovalView(approval_id="a", run_id="r", turn=1, call_id="c", args_hash="h",
                          approver_role="finance", expires_ms=2_000, state="pending")
    carol = Approver(user="carol", roles=frozenset({"finance"}))
    assert authorize(click, carol, record, team_id="T1", now_ms=1_000) is None
    assert authorize(click, carol, record, team_id="T2", now_ms=1_000) is not None
    assert "not a callgate approver" in (authorize(click, None, record, team_id=None,
                                                   now_ms=1_000) or "")
    assert "expired" in (authorize(click, carol, record, team_id=None, now_ms=2_000) or "")
    other_call = record.model_copy(update={"call_id": "c2"})
    assert "does not match" in (authorize(click, carol, other_call, team_id=None,
                                          now_ms=1_000) or "")
