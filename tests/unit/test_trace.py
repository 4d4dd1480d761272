"""Trace rendering: one aligned row per event, offsets from the first, secrets never shown."""

from __future__ import annotations

from typing import Any

from callgate.ops.trace import COLUMNS, render, rows, transition
from callgate.records import Event


def event(t_ms: int, type_: str, **data: Any) -> Event:
    return Event(id=f"{t_ms}-0", t_ms=t_ms, type=type_, data=data)


EVENTS = [
    event(
        1_000, "run.created", api="openai-responses", model="travel-demo", status="awaiting_model"
    ),
    event(1_250, "model.response", turn=1, response_id="resp_1", outcome="tool_requests"),
    event(
        1_300,
        "call.transition",
        call_id="t1.0",
        tool="get_train_status",
        **{"from": ["requested"], "to": "allowed"},
    ),
    event(
        2_500,
        "run.transition",
        turn=1,
        reason="done",
        **{"from": ["awaiting_model"], "to": "completed"},
    ),
]


def test_rows_have_offsets_ids_and_transitions() -> None:
    table = rows(EVENTS)
    assert [r[0] for r in table] == ["+0.000s", "+0.250s", "+0.300s", "+1.500s"]
    assert table[0][1] == "run.created" and table[0][5] == "→awaiting_model"
    assert table[1][2] == "1" and "response_id=resp_1" in table[1][6]
    assert table[2][3:6] == ("t1.0", "get_train_status", "requested→allowed")
    assert table[3][5] == "awaiting_model→completed"
    assert table[3][6] == "reason=done"


def test_render_is_an_aligned_table_with_a_header() -> None:
    text = render(EVENTS)
    lines = text.splitlines()
    assert lines[0].split() == list(COLUMNS)
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 2 + len(EVENTS)
    starts = {line.index(" ") for line in lines[2:]}
    assert len(starts) == 1, "the time column is padded to one width"


def test_secrets_in_event_data_are_never_rendered() -> None:
    leaked = [
        event(
            0,
            "call.transition",
            call_id="t1.0",
            api_key="sk-live-abcdefghijklmnop",
            note="Bearer abc.def.ghi",
            headers={"Authorization": "Basic xyz"},
        )
    ]
    text = render(leaked)
    for secret in ("sk-live-abcdefghijklmnop", "abc.def.ghi", "Basic xyz"):
        assert secret not in text
    assert "[redacted]" in text


def test_long_details_are_cut() -> None:
    [row] = rows([event(0, "model.retry", reason="x" * 500)])
    assert len(row[6]) <= 80 and row[6].endswith("…")


def test_empty_log_and_partial_transitions() -> None:
    assert render([]) == "(no events)"
    assert transition({}) == ""
    assert transition({"from": "a", "to": "b"}) == "a→b"
    assert transition({"from": ["validating", "executing"], "to": "handed_off"}) == (
        "validating|executing→handed_off"
    )


def test_clock_rows_start_with_wall_clock_time_and_full_cuts_nothing() -> None:
    [row] = rows([event(1_700_000_000_250, "model.retry", reason="x" * 500)], clock=True, full=True)
    assert row[0] == "2023-11-14T22:13:20.250Z" and row[1] == "+0.000s"
    assert row[7] == "reason=" + "x" * 500
    assert render(EVENTS, clock=True).splitlines()[0].split() == ["utc", *COLUMNS]
