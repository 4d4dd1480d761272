"""Pure parts of resolving an unknown outcome from Slack: the buttons' limits, codec and
escaping, the verdict blocks, and the click checks."""

from __future__ import annotations

from typing import Any

import orjson

from callgate.records import CallRecord
from callgate.slack.messages import (
    RESOLVE_ACTIONS,
    Notification,
    ResolveValue,
    resolved_blocks,
    resolved_text,
    unknown_outcome_blocks,
)
from callgate.slack.replies import Origin
from callgate.slack.resolutions import ResolveClick, authorize_resolve
from callgate.slack.settings import Approver
from callgate.states import CallState
from tests.unit.test_slack_messages import _assert_inert, _mrkdwn, _text_objects

LONGEST = Notification(
    type="unknown_outcome",
    run_id="r" * 128,
    call_id="c" * 128,
    tool="t" * 5000,
    operation_id="o" * 256,
    detail="d" * 10_000,
)
HOSTILE = Notification(
    type="unknown_outcome",
    run_id="run<!channel>",
    call_id="c<!here>",
    tool="t<https://evil.example|Applied>",
    operation_id="op`<!channel>&",
    detail="<!channel> click <https://evil.example|Applied> ```",
)


def _buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (actions,) = [b for b in blocks if b["type"] == "actions"]
    return list(actions["elements"])


def test_buttons_fit_slack_limits_and_round_trip() -> None:
    blocks = unknown_outcome_blocks(LONGEST)
    buttons = _buttons(blocks)
    assert [b["action_id"] for b in buttons] == list(RESOLVE_ACTIONS)
    for button in buttons:
        assert len(button["value"]) <= 2000
        assert ResolveValue.from_value(button["value"]) == ResolveValue(
            run_id="r" * 128, call_id="c" * 128, op="o" * 256
        )
        confirm = button.get("confirm")
        if confirm is not None:
            assert len(confirm["title"]["text"]) <= 100 and len(confirm["text"]["text"]) <= 300
            assert len(confirm["confirm"]["text"]) <= 30 and len(confirm["deny"]["text"]) <= 30
    assert all(len(obj["text"]) <= 3000 for obj in _text_objects(blocks))
    assert "empty result" in buttons[0]["confirm"]["text"]["text"]


def test_value_codec_rejects_anything_not_ours() -> None:
    assert ResolveValue.from_value("not json") is None
    assert ResolveValue.from_value('{"run_id": "r", "call_id": "c"}') is None
    assert ResolveValue.from_value('{"run_id": "r", "call_id": "c", "op": "o", "x": 1}') is None


def test_no_buttons_without_an_operation_id_to_bind_to() -> None:
    note = HOSTILE.model_copy(update={"operation_id": None})
    assert all(b["type"] != "actions" for b in unknown_outcome_blocks(note))


def test_hostile_values_are_escaped_and_still_round_trip() -> None:
    blocks = unknown_outcome_blocks(HOSTILE)
    _assert_inert(_mrkdwn(blocks))
    assert "&lt;!channel&gt;" in orjson.dumps(_mrkdwn(blocks)).decode(), "shown, not dropped"
    for button in _buttons(blocks):
        assert ResolveValue.from_value(button["value"]) == ResolveValue(
            run_id="run<!channel>", call_id="c<!here>", op="op`<!channel>&"
        )
    done = resolved_blocks(blocks, "applied", "carol<!here>", "U1>")
    _assert_inert(_mrkdwn(done))
    assert all(b["type"] != "actions" for b in done)
    assert "<" not in resolved_text("not_applied", "carol<!channel>")


def test_recheck_keeps_the_buttons_last() -> None:
    blocks = unknown_outcome_blocks(HOSTILE)
    done = resolved_blocks(blocks, "recheck", "carol", "U1")
    assert done[-1] == blocks[-1] and done[-1]["type"] == "actions"
    assert any("recheck asked by carol" in t for t in _mrkdwn(done))


CALL = CallRecord(
    run_id="r",
    call_id="c",
    turn=1,
    index=0,
    provider_call_id="fc",
    tool="reserve_seat",
    operation_id="op",
    state=CallState.UNRESOLVED,
)
CAROL = Approver(user="carol")


def _click(team: str = "T1", value: ResolveValue | None = None) -> ResolveClick:
    origin = Origin("U1", team, "C1", "1.0", None)
    return ResolveClick(origin, "applied", value or ResolveValue(run_id="r", call_id="c", op="op"))


def test_authorize_checks_who_then_the_call() -> None:
    assert authorize_resolve(_click(), CAROL, CALL, team_id="T1") is None
    assert "workspace" in (authorize_resolve(_click("T2"), CAROL, CALL, team_id="T1") or "")
    assert "not mapped" in (authorize_resolve(_click(), None, CALL, team_id=None) or "")
    assert "no such call" in (authorize_resolve(_click(), CAROL, None, team_id=None) or "")
    done = CALL.model_copy(update={"state": CallState.FAILED})
    assert "failed, not unresolved" in (
        authorize_resolve(_click(), CAROL, done, team_id=None) or ""
    )
    other = _click(value=ResolveValue(run_id="r", call_id="c", op="op-2"))
    assert "operation id" in (authorize_resolve(other, CAROL, CALL, team_id=None) or "")
    elsewhere = _click(value=ResolveValue(run_id="r", call_id="c2", op="op"))
    assert "does not match" in (authorize_resolve(elsewhere, CAROL, CALL, team_id=None) or "")
    unknown = ResolveClick(Origin("U1", "T1", "C1", "1.0", None), None, None)
    assert "not a callgate" in (authorize_resolve(unknown, CAROL, CALL, team_id=None) or "")
