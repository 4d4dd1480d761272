"""``--as`` takes a person's key name: a path (``../keys/carol``) or anything else unsafe as a
key file name is one usage line with exit 2 for every command that takes it, not a traceback."""

from __future__ import annotations

import pytest

from callgate.ops.cli import main

COMMANDS = [
    ["cancel", "r-1"], ["resume", "r-1"], ["resolve", "r-1", "t1.0", "--applied"],
    ["approve", "a-1"], ["deny", "a-1", "--reason", "no"],
]  # fmt: skip


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize("name", ["../keys/carol", "/etc/passwd", ".carol", ""])
def test_a_path_as_the_person_is_one_usage_line(
    argv: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--as", name])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"callgate {argv[0]}: argument --as: {name!r} is not a key name")


def test_the_demo_approver_is_checked_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "workshop", "--approve-as", "../keys/carol"])
    assert stopped.value.code == 2
    assert "is not a key name" in capsys.readouterr().err
