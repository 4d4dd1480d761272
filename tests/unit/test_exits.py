"""The exit-code contract: a run's status and each error a person can fix map to one code and
one line, never a password; a bug maps to nothing (it keeps its traceback)."""

from __future__ import annotations

import pytest
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError

from callgate.errors import (
    JobFailedError,
    NotFoundError,
    RedisUnavailableError,
    RunSpecError,
    SpecConflictError,
)
from callgate.ops.exits import exit_for_status, failure, unreachable
from callgate.states import RunState

CODES = {
    RunState.COMPLETED: 0,
    RunState.FAILED: 1,
    RunState.REFUSED: 1,
    RunState.HANDED_OFF: 1,
    RunState.CANCELLED: 1,
    RunState.PAUSED_APPROVAL: 4,
    RunState.PAUSED_UNKNOWN_OUTCOME: 4,
    RunState.PAUSED_INCOMPLETE: 4,
}


@pytest.mark.parametrize("status", list(CODES))
def test_run_wait_exits_by_the_status_it_settled_in(status: RunState) -> None:
    assert exit_for_status(status) == CODES[status]
    assert exit_for_status(status.value) == CODES[status]


def test_errors_map_to_one_line_and_a_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://u:pw-123@db:6379/0")
    down = f"{unreachable('redis://u:pw-123@db:6379/0')}"
    assert "pw-123" not in down and "[redacted]" in down
    assert failure(RedisUnavailableError("redis unavailable: x")) == (down, 5)
    assert failure(RedisConnectionError("Error 111")) == (down, 5)
    line, code = failure(AuthenticationError("invalid password")) or ("", 0)
    assert code == 5 and "refused the credentials" in line and "pw-123" not in line
    assert failure(NotFoundError("no run r")) == ("no run r", 3)
    assert failure(SpecConflictError("r"))[1] == 3  # type: ignore[index]
    assert failure(RunSpecError(["input: required", "api:\nbad"])) == (
        "invalid run spec: input: required; api: bad",
        2,
    )
    assert failure(JobFailedError("run r was not started: redis://u:pw-123@db")) == (
        "run r was not started: redis://u:[redacted]@db",
        1,
    )
    assert failure(TimeoutError("run r still validating after 1s"))[1] == 1  # type: ignore[index]
    assert failure(KeyError("bug")) is None
