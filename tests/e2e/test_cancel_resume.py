"""Cancel and resume, end to end (real workers, the demo services, the scripted model):

* cancel while a write is in flight (the booking service commits, then holds its answer): the
  run ends ``cancelled`` at once, the write settles with its true outcome (exactly the one
  reservation the service made), and no later model request arrives;
* cancel a run paused for approval: its call ends ``cancelled``, the approval is withdrawn and a
  late approval is refused; someone who is neither the run's user nor an operator is refused;
* a truncated turn pauses ``paused_incomplete``; resume asks again and the run completes —
  nothing from the truncated response ran;
* a run handed off at its turn budget resumes with a larger one and completes, each protocol;
* a run handed off mid-turn — while its write ran, or while it waited for an approval — is
  stranded until resumed, then takes its turn up again and completes: the write settled during
  the hand-off is neither lost nor sent again, the call the hand-off cancelled never runs."""

from __future__ import annotations

import asyncio

import pytest

from callgate.auth.deployment import signer_of
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk
from callgate.ops.control_cli import control
from callgate.ops.system import LocalSystem
from callgate.states import RunState
from callgate.sweeps import DEADLINE_REACHED
from tests.e2e.people import APIS, TRAVEL, approve, http, status, submit, until

pytestmark = pytest.mark.slow


async def model_requests(system: LocalSystem, scenario: str) -> int:
    return len(
        [e for e in await http(system, "model", "GET", "/_log") if e["scenario"] == scenario]
    )


async def write_in_flight(system: LocalSystem, client: CallgateClient, api: str) -> str:
    """A run whose approved reservation the booking service has committed and holds the
    answer of (2 s); its run id, once the call is ``executing``."""
    slow = {"mode": "slow", "delay_s": 2.0, "commit": "before", "count": 1}
    await http(system, "booking", "POST", "/_faults", {"reserve": slow})
    run_id = await submit(client, api, "conf-reserve", ["reserve_seat"])
    await until(client, run_id, status("paused_approval"))
    await approve(system, client, run_id)
    await until(client, run_id, lambda v: v["calls"][0]["state"] == "executing")
    return run_id


async def test_cancel_with_a_write_in_flight_keeps_its_true_outcome(
    system: LocalSystem, client: CallgateClient
) -> None:
    run_id = await write_in_flight(system, client, "openai-chat")
    asked = await model_requests(system, "conf-reserve")

    code, said = await control(
        client, run_id, "cancel", signer_of(system.settings, "alice"), reason="changed plans"
    )
    assert code == 0, said
    assert (await client.view(run_id))["status"] == "cancelled"
    view = await until(client, run_id, lambda v: v["calls"][0]["state"] == "succeeded")
    assert view["status"] == "cancelled"
    stats = await http(system, "booking", "GET", "/_stats")
    assert stats["reservations_by_participant"] == {"ws-200/p-alice": 1}
    await asyncio.sleep(1.0)  # time for any (wrong) next turn to reach the model
    assert await model_requests(system, "conf-reserve") == asked, "no model turn after cancel"


async def test_cancel_withdraws_a_pending_approval_and_needs_the_user_or_an_operator(
    system: LocalSystem, client: CallgateClient
) -> None:
    run_id = await submit(client, "anthropic-messages", "conf-reserve", ["reserve_seat"])
    await until(client, run_id, status("paused_approval"))
    code, said = await control(client, run_id, "cancel", signer_of(system.settings, "bob"))
    assert (code, said.startswith("refused: bob is neither")) == (1, True), said
    code, said = await control(client, run_id, "cancel", signer_of(system.settings, "operator"))
    assert code == 0, said
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.state == "cancelled" and call.approval_id is not None
    record = await client.ledger.get_approval(run_id, call.approval_id)
    assert record is not None and record.state == "withdrawn"
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    after = await desk.last_event_id(run_id)
    late = await desk.post(record, "approve", signer_of(system.settings, "carol"))
    verdict = await desk.wait_outcome(late, after, 10)
    assert verdict is not None and not verdict.applied
    assert (await http(system, "booking", "GET", "/_stats"))["reserve"]["requests"] == 0


@pytest.mark.parametrize("api", APIS)
async def test_a_truncated_turn_resumes_and_completes(
    system: LocalSystem, client: CallgateClient, api: str
) -> None:
    run_id = await submit(client, api, "truncated-once", TRAVEL)
    view = await until(client, run_id, status("paused_incomplete"))
    assert view["calls"] == [], "nothing from the truncated response was recorded"
    code, said = await control(client, run_id, "resume", signer_of(system.settings, "alice"))
    assert code == 0, said
    view = await until(client, run_id, status("completed"))
    assert [c["state"] for c in view["calls"]] == ["succeeded"]
    assert "G1234" in view["final_text"]


@pytest.mark.parametrize("api", APIS)
async def test_a_run_handed_off_at_its_turn_budget_resumes_with_a_larger_one(
    system: LocalSystem, client: CallgateClient, api: str
) -> None:
    run_id = await submit(client, api, "travel-parallel", TRAVEL, max_turns=1)
    view = await until(client, run_id, status("handed_off"))
    assert "turn budget" in (view.get("reason") or ""), view
    code, said = await control(
        client, run_id, "resume", signer_of(system.settings, "alice"), max_turns=1
    )
    assert code == 1 and "no room" in said, said
    code, said = await control(
        client, run_id, "resume", signer_of(system.settings, "alice"), max_turns=2
    )
    assert code == 0, said
    await until(client, run_id, status("completed"))
    run = await client.ledger.get_run(run_id)
    assert run is not None and (run.max_turns, run.turn) == (2, 2)
    ttl = await client.redis.ttl(client.keys.run(run_id))
    assert ttl > 0, "completed again: its keys expire again"


async def hand_off(client: CallgateClient, run_id: str) -> None:
    """What the deadline sweep does to a run whose deadline passed, now."""
    run = await client.ledger.get_run(run_id)
    assert run is not None
    assert (
        await client.ledger.apply(
            await client.ledger.end_run(run, RunState.HANDED_OFF, DEADLINE_REACHED)
        )
    ).ok


async def test_a_run_handed_off_while_its_write_ran_takes_its_turn_up_when_resumed(
    system: LocalSystem, client: CallgateClient
) -> None:
    run_id = await write_in_flight(system, client, "openai-responses")
    await hand_off(client, run_id)
    view = await until(client, run_id, lambda v: v["calls"][0]["state"] == "succeeded")
    await asyncio.sleep(1.0)  # time for model_turn to read the result (and do nothing)
    assert (await client.view(run_id))["status"] == "handed_off", "stranded until resumed"

    code, said = await control(client, run_id, "resume", signer_of(system.settings, "alice"))
    assert code == 0, said
    view = await until(client, run_id, status("completed"))
    assert '"status":"confirmed"' in view["final_text"], "the model got the settled result"
    stats = await http(system, "booking", "GET", "/_stats")
    assert stats["reservations_by_participant"] == {"ws-200/p-alice": 1}
    assert stats["reserve"]["requests"] == 1, "the write was not sent again"


async def test_a_run_handed_off_while_paused_for_approval_resumes_without_that_call(
    system: LocalSystem, client: CallgateClient
) -> None:
    run_id = await submit(client, "anthropic-messages", "conf-reserve", ["reserve_seat"])
    await until(client, run_id, status("paused_approval"))
    await hand_off(client, run_id)
    call = await client.ledger.get_call(run_id, "t1.0")
    assert call is not None and call.state == "cancelled"

    code, said = await control(client, run_id, "resume", signer_of(system.settings, "alice"))
    assert code == 0, said
    view = await until(client, run_id, status("completed"))
    assert "cancelled" in view["final_text"], view["final_text"]
    assert (await http(system, "booking", "GET", "/_stats"))["reserve"]["requests"] == 0
