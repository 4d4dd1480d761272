"""The bot's read-only views of a pending approval record (hash ``keys.approval``) and of a
call record (hash ``keys.call``).

The validator owns the records and is the authority on whether a decision applies; the bot
reads them only to know which role a click needs, whether it is still worth posting, whether a
call still waits for a person, and the turn the decision envelope must name.  Unknown fields
are ignored, so the records can grow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from callgate.connect import RedisClient
from callgate.keys import Keys
from callgate.records import CallRecord

R = TypeVar("R")


class ApprovalView(BaseModel):
    """The fields of the approval record the bot uses (all stored as strings)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    approval_id: str
    run_id: str
    turn: int
    call_id: str
    tool: str = ""
    args_hash: str
    requested_by: str = ""
    approver_role: str = ""
    expires_ms: int = 0
    state: str = "pending"

    def expired(self, now_ms: int | None = None) -> bool:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return self.expires_ms > 0 and now >= self.expires_ms


class MalformedRecordError(ValueError):
    """The record exists but lacks a field the bot needs (written by an incompatible version)."""


async def load_approval(
    redis: RedisClient, keys: Keys, run_id: str, approval_id: str
) -> ApprovalView | None:
    """The record, or None when there is none (never written, or expired out of Redis)."""
    return await _load(redis, keys.approval(run_id, approval_id), _approval_view)


async def load_call(redis: RedisClient, keys: Keys, run_id: str, call_id: str) -> CallRecord | None:
    """The call record, or None when there is none."""
    return await _load(redis, keys.call(run_id, call_id), CallRecord.from_hash)


def _approval_view(raw: dict[Any, Any]) -> ApprovalView:
    return ApprovalView.model_validate(
        {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
    )


async def _load(redis: RedisClient, key: str, parse: Callable[[dict[Any, Any]], R]) -> R | None:
    raw: dict[Any, Any] = await redis.hgetall(key)  # type: ignore[misc]
    if not raw:
        return None
    try:
        return parse(raw)
    except ValueError as exc:  # pydantic's ValidationError is one too
        raise MalformedRecordError(str(exc)) from exc
