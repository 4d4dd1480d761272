"""Numbers a message carries are bounded by its envelope: anyone who may XADD a stream chooses
them, so one no record could hold (``approval_ttl_s: 1e308``, a turn of 10**30) fails to decode
with the field named — a dead letter that fails nothing — instead of raising later in a
handler.  Each stream carries only its own kinds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from callgate.envelopes import (
    CARRIED_ON,
    ApprovalExpired,
    ApprovalRequested,
    CallResult,
    ExecRequest,
    ReconcileRequest,
    SignedDecision,
    TurnRequest,
    ValidateRequest,
    decode,
    home_stream,
)
from callgate.errors import EnvelopeError
from callgate.facts import APPROVAL_TTL_MAX_S, CALLS_MAX

BASE = {"v": 1, "msg_id": "m1", "run_id": "r1", "turn": 1}


def _validate(ttl: Any = 60.0, index: Any = 0, **more: Any) -> dict[str, Any]:
    run = {
        "identity": {"user": "alice"},
        "allowed_tools": ["t"],
        "batch_policy": "hold_effects",
        "approval_ttl_s": ttl,
    }
    call = {"call_id": "t1.0", "index": index, "tool": "t", "raw_arguments": "{}"}
    return {
        **BASE,
        "kind": "validate_request",
        "call_ids": ["t1.0"],
        "facts": {"run": run, "calls": [call]},
        **more,
    }


def _exec(attempts: Any) -> dict[str, Any]:
    call = {"tool": "t", "tool_version": "1", "effect": "read", "arguments": {}}
    facts = {"run": {"identity": {}}, "call": call, "attempts": attempts}
    return {**BASE, "kind": "exec_request", "call_id": "t1.0", "facts": facts}


OUT_OF_RANGE: dict[str, tuple[dict[str, Any], str]] = {
    "approval ttl 1e308": (_validate(ttl=1e308), "facts.run.approval_ttl_s"),
    "approval ttl zero": (_validate(ttl=0.0), "facts.run.approval_ttl_s"),
    "approval ttl negative": (_validate(ttl=-5.0), "facts.run.approval_ttl_s"),
    "call index": (_validate(index=10**12), "facts.calls.0.index"),
    "turn": ({**BASE, "turn": 10**30, "kind": "turn_request"}, "turn"),
    "too many call ids": (
        _validate(call_ids=[f"t1.{i}" for i in range(CALLS_MAX + 1)]),
        "call_ids",
    ),
    "reconcile attempt": (
        {**BASE, "kind": "reconcile_request", "call_id": "c", "attempt": 10**9},
        "attempt",
    ),
    "exec attempts": (_exec(10**9), "facts.attempts"),
    "expiry": (
        {
            **BASE,
            "kind": "approval_requested",
            "call_id": "c",
            "approval_id": "a",
            "tool": "t",
            "args_hash": "h",
            "arguments": {},
            "approver_role": "r",
            "requested_by": "u",
            "expires_ms": 10**20,
        },
        "expires_ms",
    ),
}


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_a_number_out_of_range_does_not_decode(case: str) -> None:
    message, field = OUT_OF_RANGE[case]
    with pytest.raises(EnvelopeError) as raised:
        decode(json.dumps(message))
    kind = message["kind"]
    reason = raised.value.message
    assert reason.startswith(f"invalid envelope: {kind}.{field}:"), reason


def test_the_largest_values_a_run_can_hold_still_decode() -> None:
    decided = decode(json.dumps(_validate(ttl=float(APPROVAL_TTL_MAX_S), index=15)))
    assert isinstance(decided, ValidateRequest) and decided.facts is not None
    assert decided.facts.run.approval_ttl_s == APPROVAL_TTL_MAX_S
    assert isinstance(decode(json.dumps(_validate(ttl=None))), ValidateRequest)


def test_each_kind_has_one_stream_and_decisions_take_only_decisions() -> None:
    assert CARRIED_ON["decisions"] == (SignedDecision, ApprovalExpired)
    homes = {
        kind: home_stream(kind)
        for kind in (
            TurnRequest,
            ValidateRequest,
            ExecRequest,
            CallResult,
            ReconcileRequest,
            SignedDecision,
            ApprovalExpired,
            ApprovalRequested,
        )
    }
    assert homes == {
        TurnRequest: "turns",
        ValidateRequest: "validate",
        ExecRequest: "exec",
        CallResult: "results",
        ReconcileRequest: "reconcile",
        SignedDecision: "decisions",
        ApprovalExpired: "decisions",
        ApprovalRequested: "notify",
    }
    carried = [kind for kinds in CARRIED_ON.values() for kind in kinds]
    assert len(carried) == len(set(carried))
