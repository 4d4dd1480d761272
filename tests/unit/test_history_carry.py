"""`HistoryCarry`: bounded hand-overs between a turn's steps; a failed step drops only its own."""

from __future__ import annotations

from shared.history_carry import HistoryCarry, Started


def _started(*items: bytes) -> Started:
    return Started(["t1.0"], list(items))


def test_an_entry_is_read_until_taken_once() -> None:
    carry = HistoryCarry(limit=10)
    entry = carry.started.put(("r", 1), _started(b"a"))
    assert carry.started.get(("r", 1)) is entry  # each result of the turn may look
    assert carry.started.take(("r", 1)) is entry  # the step that ends the turn takes it
    assert carry.started.take(("r", 1)) is None


def test_a_failed_step_drops_its_own_entry_not_a_newer_one() -> None:
    carry = HistoryCarry(limit=10)
    mine = carry.started.put(("r", 1), _started(b"a"))
    newer = carry.started.put(("r", 1), _started(b"a"))  # a racing step of the same turn
    carry.started.drop(("r", 1), mine)
    assert carry.started.take(("r", 1)) is newer
    carry.started.put(("r", 2), mine)
    carry.started.drop(("r", 2), mine)
    assert carry.started.take(("r", 2)) is None


def test_the_oldest_entries_go_beyond_the_limit() -> None:
    carry = HistoryCarry(limit=2)
    for turn in (1, 2, 3):
        carry.started.put(("r", turn), _started(b"%d" % turn))
    assert carry.started.take(("r", 1)) is None
    assert carry.started.take(("r", 3)) == _started(b"3")
