"""Pending approvals (DESIGN §7): the record, and the pure rule that decides whether a
human's decision may apply.

A decision applies only if it is for a live approval, from an approver who holds the role,
for the same canonical arguments, and it is the first one; anything else is refused with a
reason and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from callgate.envelopes import ApprovalDecision

ApprovalState = Literal["pending", "approved", "denied", "expired"]


class ApprovalRecord(BaseModel):
    """One pending action, bound to its run, turn, call, tool and exact arguments."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    approval_id: str
    run_id: str
    turn: int
    call_id: str
    tool: str
    tool_version: str
    args_hash: str
    arguments: str
    """Canonical JSON of the arguments the approver is shown."""
    requested_by: str
    approver_role: str
    expires_ms: int
    state: ApprovalState = "pending"
    decided_by: str | None = None
    decided_ms: int | None = None
    reason: str | None = None

    def to_hash(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items() if v is not None}

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> ApprovalRecord:
        return cls.model_validate({k.decode(): v.decode() for k, v in raw.items()})


def refusal(
    record: ApprovalRecord | None,
    decision: ApprovalDecision,
    approver_roles: Sequence[str],
    now_ms: int,
) -> str | None:
    """Why ``decision`` must not apply, or None if it may."""
    if record is None:
        return "no such approval"
    if (record.run_id, record.call_id, record.turn) != (
        decision.run_id,
        decision.call_id,
        decision.turn,
    ):
        return "the decision does not match the approval's run, turn or call"
    if record.state != "pending":
        return f"already decided ({record.state})"
    if now_ms >= record.expires_ms:
        return "the approval has expired"
    if decision.args_hash != record.args_hash:
        return "the decision is for different arguments than the pending request"
    if record.approver_role not in approver_roles:
        return f"{decision.approver} does not hold the role {record.approver_role}"
    if decision.approver == record.requested_by:
        return "the requester cannot approve their own request"
    return None
