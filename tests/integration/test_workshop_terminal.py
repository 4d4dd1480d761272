"""`callgate demo workshop` asks a person in the terminal: without one it says how to decide
instead (one line, before starting anything); Ctrl-D at its prompt means no."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from callgate.ops.demo_workshop import NO_TERMINAL

ASK = """
import asyncio
from callgate.decisions.record import ApprovalRecord
from callgate.ops.demo_workshop import ask_in_terminal

record = ApprovalRecord(
    approval_id="ap-1", run_id="run-1", turn=1, call_id="call-1", tool="reserve_seat",
    tool_version="1", args_hash="h", arguments='{"workshop_id": "ws-101"}',
    requested_by="alice", approver_role="events-lead", expires_ms=0)
print(asyncio.run(ask_in_terminal(record)))
"""


def test_without_a_terminal_it_says_to_pass_approve_as(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "callgate.ops.cli", "demo", "workshop"],
        env={**os.environ, "CALLGATE_HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"callgate: {NO_TERMINAL}"]
    assert "--approve-as" in NO_TERMINAL and "\n" not in NO_TERMINAL


@pytest.mark.parametrize(
    ("typed", "decided"),
    [
        (b"\x04\x04\x04", "('deny', 'carol', 'denied in the demo')"),
        (b"y\n\x04", "('approve', 'carol', None)"),
        (b"n\ndave\n\x04", "('deny', 'dave', 'denied in the demo')"),
    ],
)
def test_eof_at_the_prompt_means_no(typed: bytes, decided: str) -> None:
    """A real terminal (a pty) as stdin; Ctrl-D (EOF) answers each prompt with its default."""
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", ASK],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(master, typed)
        out, err = process.communicate(timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1].endswith(decided), out
    assert "Traceback" not in err
