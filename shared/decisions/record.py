"""Pending approvals (README: Approvals and unknown outcomes): the record, and the pure
rule that decides whether a person's verified decision may apply.

A decision applies only if it is for a live approval, from a person who holds the role (as
the deployment's trust file says), for the same canonical arguments, not the requester's own,
and it is the first one; anything else is refused with a reason and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from callgate.auth.tokens import VerifiedDecision
from callgate.decisions.claims import ApprovalClaims
from callgate.records import LEDGER_SCHEMA, SCHEMA_FIELD, refuse_newer

ApprovalState = Literal["pending", "approved", "consumed", "denied", "expired", "withdrawn"]
"""``consumed``: approved, and its call taken to run (in the executor's take step), so the
approval sends no second call.  ``withdrawn``: its run was cancelled or ended while it waited."""


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
    """The verified person who decided (or None: expired)."""
    decided_ms: int | None = None
    requested_ms: int | None = None
    """When the validator asked (None on records made before it was kept): the approval's wait
    is ``decided_ms - requested_ms``."""
    reason: str | None = None
    signed_by: str | None = None
    """The key the decision was signed with (the person's own, or a delegate's: the bot)."""
    decision_token: str | None = None
    """The signed decision itself, which the executor verifies again before dispatch."""

    def to_hash(self) -> dict[str, str]:
        fields = {k: str(v) for k, v in self.model_dump().items() if v is not None}
        return {**fields, SCHEMA_FIELD: str(LEDGER_SCHEMA)}

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> ApprovalRecord:
        version = raw.get(SCHEMA_FIELD.encode())
        if version is not None:
            refuse_newer(cls.__name__, version)
        return cls.model_validate({k.decode(): v.decode() for k, v in raw.items()})


def shown_state(state: str) -> str:
    """An approval's state as a person reads it (a refusal, a Slack reply)."""
    return "approved and used" if state == "consumed" else state


def refusal(
    record: ApprovalRecord | None, claims: ApprovalClaims, decided: VerifiedDecision, now_ms: int
) -> str | None:
    """Why a verified decision must not apply to ``record``, or None if it may.  The person
    and their roles are the verified ones, never a name a message carries."""
    if record is None:
        return "no such approval"
    if (record.run_id, record.call_id) != (claims.run, claims.call):
        return "the decision does not match the approval's run or call"
    if record.state != "pending":
        return f"already decided ({shown_state(record.state)})"
    if now_ms >= record.expires_ms:
        return "the approval has expired"
    if claims.hash != record.args_hash:
        return "the decision is for different arguments than the pending request"
    if record.approver_role not in decided.roles:
        return f"{decided.person} does not hold the role {record.approver_role}"
    if decided.person == record.requested_by:
        return "the requester cannot approve their own request"
    return None
