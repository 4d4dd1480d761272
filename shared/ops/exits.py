"""The `callgate` exit-code contract, and the one line a command ends with when it fails.

Scripts branch on the code, people read the line: so every failure a person can cause or fix
(Redis not running, a run id that does not exist, a bad flag) ends as one ``callgate: …`` line
on stderr and a code from `CONTRACT`, never a traceback and never a password.  A traceback is
left only for what no person can fix: a bug.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError
from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from callgate.auth.keyring import LocalKeyring
from callgate.client import CallgateClient
from callgate.compiled import StaleBuildError
from callgate.config import Settings, bad_settings
from callgate.errors import (
    CallgateError,
    ConflictError,
    NotFoundError,
    RedisUnavailableError,
    RunSpecError,
)
from callgate.ledger.reads import redis_errors
from callgate.logs import mask_url_password
from callgate.states import RUN_PAUSED, RunState

OK = 0
"""The run completed; the decision was taken; the command did what it was asked."""
ENDED = 1
"""The run failed, was refused, handed off or cancelled; a decision was refused; the command
failed (e.g. ``--wait`` timed out)."""
USAGE = 2
"""A bad flag, argument, setting or run spec: nothing was submitted (argparse's own code)."""
CONFLICT = 3
"""The run id is taken by a run with another spec, or the run (approval, call) does not exist."""
PAUSED = 4
"""``run --wait`` came back with the run paused, waiting for a person."""
UNREACHABLE = 5
"""Redis did not answer or refused the credentials: nothing was read or done."""

CONTRACT = f"""exit codes:
  {OK}  completed / decided / done
  {ENDED}  the run failed, was refused, handed off or cancelled; a decision was refused;
     the command failed (e.g. --wait timed out)
  {USAGE}  usage: a bad flag, argument, setting or run spec (nothing was submitted)
  {CONFLICT}  conflict or not found: the run id is taken by another spec; no such run
  {PAUSED}  paused waiting for a person (run --wait: an approval, an unknown outcome)
  {UNREACHABLE}  cannot reach Redis (or it refused the credentials): nothing was done"""
"""What `callgate --help` and README's Commands section print."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def exit_for_status(status: str) -> int:
    """The code ``run --wait`` ends with for the status the run settled in."""
    if status == RunState.COMPLETED:
        return OK
    if status in RUN_PAUSED:
        return PAUSED
    return ENDED


def one_line(text: str) -> str:
    """``text`` on one line with every URL password masked: what a terminal may show."""
    return mask_url_password(" ".join(str(text).split()))


def person_name(text: str) -> str:
    """``--as NAME`` (argparse ``type``): a key name of the local keyring, so a path such as
    ``../keys/carol`` is a usage line with exit 2 rather than a traceback from the keyring."""
    try:
        LocalKeyring(Path()).key_path(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def redis_url() -> str:
    """The Redis a command talked to, for its error line (settings first, then the env)."""
    try:
        return Settings().redis_url
    except ValidationError:
        return os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)


def unreachable(url: str) -> str:
    """The line for a Redis that did not answer: what is wrong and what to do."""
    return (
        f"cannot reach Redis at {mask_url_password(url)} — start it, or `callgate up`/set REDIS_URL"
    )


def failure(exc: BaseException) -> tuple[str, int] | None:
    """The line and exit code for ``exc``; None for a bug (left to raise, with its traceback)."""
    if isinstance(exc, AuthenticationError):
        return (
            f"Redis at {mask_url_password(redis_url())} refused the credentials — check "
            "the user and password in REDIS_URL",
            UNREACHABLE,
        )
    if isinstance(exc, NoPermissionError):
        return (
            f"Redis refused a command for this user ({one_line(str(exc))}) — use the "
            "deployment's user for this command in REDIS_URL",
            ENDED,
        )
    if isinstance(
        exc, RedisUnavailableError | RedisConnectionError | RedisTimeoutError | ConnectionError
    ):
        return unreachable(redis_url()), UNREACHABLE
    if isinstance(exc, ValidationError) and (bad := bad_settings(exc)) is not None:
        return one_line(bad), USAGE
    if isinstance(exc, RunSpecError | StaleBuildError):
        return one_line(str(exc)), USAGE
    if isinstance(exc, ConflictError | NotFoundError):
        return one_line(str(exc)), CONFLICT
    if isinstance(exc, CallgateError | TimeoutError):
        return one_line(str(exc)), ENDED
    return None


async def with_client(
    action: Callable[[CallgateClient], Awaitable[int]], settings: Settings | None = None
) -> int:
    """Run ``action`` with a client whose Redis answered a PING first: a Redis that is down
    is then one line at once, rather than arq's connection retries or a half-done command."""
    async with CallgateClient(settings or Settings()) as client:
        with redis_errors():
            await client.redis.ping()
        return await action(client)
