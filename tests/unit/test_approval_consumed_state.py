"""An approval the executor consumed reads back as a record, and a decision that arrives after
it (a late click, a replay) is refused as "already decided (approved and used)"."""

from __future__ import annotations

from callgate.auth.tokens import VerifiedDecision
from callgate.decisions.claims import read_approval_claims
from callgate.decisions.record import ApprovalRecord, refusal

RECORD = {
    "approval_id": "apr-1",
    "run_id": "run-1",
    "turn": "1",
    "call_id": "t1.0",
    "tool": "reserve_seat",
    "tool_version": "1",
    "args_hash": "h",
    "arguments": "{}",
    "requested_by": "alice",
    "approver_role": "events-lead",
    "expires_ms": str(2**40),
    "state": "consumed",
}


def test_a_late_decision_on_a_consumed_approval_is_refused_as_used() -> None:
    record = ApprovalRecord.from_hash({k.encode(): v.encode() for k, v in RECORD.items()})
    claims = read_approval_claims(
        {"act": "approve", "run": "run-1", "apr": "apr-1", "call": "t1.0", "hash": "h", "jti": "j"}
    )
    carol = VerifiedDecision(
        signer="carol", person="carol", roles=frozenset({"events-lead"}), claims={}
    )

    assert record.state == "consumed"
    assert refusal(record, claims, carol, now_ms=0) == "already decided (approved and used)"
