"""The workshop tools' declarations and policy hooks, through the validator's pure `decide`."""

from __future__ import annotations

import orjson
import pytest

from callgate.standins.demo.workshop import APPROVER_ROLE, TOOLS, ParticipantArgs, reserve_seat
from callgate.tools.contract import Effect, Identity
from callgate.tools.policy import Decision, Limits, decide
from callgate.tools.registry import load_registry

ALICE = Identity(user="alice")
BOB = Identity(user="bob")
LEAD = Identity(user="dana", roles=[APPROVER_ROLE])
REGISTRY = load_registry(["callgate.standins.demo.workshop"])
ALLOWED = REGISTRY.names()


def _decide(identity: Identity, name: str, **arguments: str) -> Decision:
    return decide(
        REGISTRY, allowed_tools=ALLOWED, identity=identity, name=name,
        raw_arguments=orjson.dumps(arguments).decode(), limits=Limits(),
    )  # fmt: skip


def test_declarations() -> None:
    assert [t.name for t in TOOLS] == ["check_seats", "check_eligibility", "reserve_seat"]
    assert [t.effect for t in TOOLS] == [Effect.READ, Effect.READ, Effect.WRITE]
    assert reserve_seat.reconcile is not None
    args = ParticipantArgs(event_id="ws-101", participant_id="p-alice")
    assert reserve_seat.resource_of(args) == "event:ws-101"
    schema = reserve_seat.json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"event_id", "participant_id"}


@pytest.mark.parametrize("identity", [ALICE, BOB, LEAD])
def test_approval_rule_always_asks_an_events_lead(identity: Identity) -> None:
    args = ParticipantArgs(event_id="ws-101", participant_id="p-bob")
    assert reserve_seat.approval(identity, args) == "events-lead"


@pytest.mark.parametrize(
    ("identity", "participant", "allowed"),
    [
        (ALICE, "p-alice", True),
        (ALICE, "p-bob", False),
        (BOB, "p-bob", True),
        (BOB, "p-alice", False),
        (LEAD, "p-alice", True),
        (LEAD, "p-carol", True),
        (Identity(user="mallory"), "p-alice", False),
    ],
)
def test_authorize_scopes_each_user_to_their_participant(
    identity: Identity, participant: str, allowed: bool
) -> None:
    args = ParticipantArgs(event_id="ws-101", participant_id=participant)
    reason = reserve_seat.authorize(identity, args)
    assert (reason is None) is allowed
    if not allowed:
        assert participant in (reason or "")


def test_decide_alice_for_bob_is_not_authorized() -> None:
    decision = _decide(ALICE, "reserve_seat", event_id="ws-101", participant_id="p-bob")
    assert decision.outcome == "rejected"
    assert decision.error is not None and decision.error.code == "not_authorized"
    assert decision.tool is None


def test_decide_alice_for_herself_needs_events_lead_approval() -> None:
    decision = _decide(ALICE, "reserve_seat", event_id="ws-101", participant_id="p-alice")
    assert decision.outcome == "needs_approval"
    assert decision.approver_role == "events-lead"
    assert not decision.executable
    assert decision.args_hash is not None


def test_decide_reads_are_allowed_and_ids_are_checked() -> None:
    assert _decide(BOB, "check_seats", event_id="ws-101").outcome == "allowed"
    eligibility = _decide(BOB, "check_eligibility", event_id="ws-101", participant_id="p-carol")
    assert eligibility.outcome == "allowed"
    bad = _decide(ALICE, "reserve_seat", event_id="../_reset", participant_id="p-alice")
    assert bad.error is not None and bad.error.code == "invalid_arguments"
