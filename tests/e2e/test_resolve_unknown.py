"""A person resolves a write whose outcome stayed unknown, end to end over each protocol (real
workers, the booking service, the scripted model): the reservation's answer is lost and every
lookup is inconclusive, so the run pauses ``paused_unknown_outcome``; then

* ``callgate resolve --applied --result …`` → the model is told that result, the run completes,
  and the booking service holds exactly the one reservation its first request made;
* ``--not-applied`` → the model is told the write did not happen; callgate makes none;
* ``--recheck`` once the service answers lookups again → reconciled by the system itself;
* a second, a replayed, an unauthorized and a foreign-signed resolution are refused, logged in
  the run's trace, and change nothing.  Nothing is ever replayed to the service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.deployment import signer_of
from callgate.auth.tokens import Signer
from callgate.client import CallgateClient
from callgate.decisions.desk import ApprovalDesk, Outcome
from callgate.ops.control_cli import resolve
from callgate.ops.embedded_redis import EmbeddedRedis
from callgate.ops.system import LocalSystem
from callgate.records import CallRecord
from tests.e2e.people import APIS, approve, deployment, http, status, until

pytestmark = pytest.mark.slow

LOST_AND_INCONCLUSIVE = {"lookup": {"mode": "lookup_unknown"}}


@pytest.fixture(scope="module")
def system(redis_server: EmbeddedRedis) -> Iterator[LocalSystem]:
    yield from deployment(
        redis_server, ("booking",), {"CALLGATE_RECONCILE_SCHEDULE_S": "[0, 0.2, 0.4]"}
    )


@pytest.fixture
async def client(system: LocalSystem) -> AsyncIterator[CallgateClient]:
    await booking(system, "POST", "/_reset")
    async with CallgateClient(system.settings) as c:
        yield c


async def booking(system: LocalSystem, method: str, path: str, body: Any = None) -> Any:
    return await http(system, "booking", method, path, body)


async def unresolved(
    system: LocalSystem, client: CallgateClient, api: str, reserve_fault: str
) -> CallRecord:
    """A run whose approved reservation lost its answer and could not be looked up."""
    await booking(
        system,
        "POST",
        "/_faults",
        {"reserve": {"mode": reserve_fault, "count": 1}, **LOST_AND_INCONCLUSIVE},
    )
    run_id = await client.submit(
        {
            "api": api,
            "model": "conf-reserve",
            "input": "book",
            "identity": {"user": "alice"},
            "allowed_tools": ["reserve_seat"],
        }
    )
    await until(client, run_id, status("paused_approval"))
    await approve(system, client, run_id)
    await until(client, run_id, status("paused_unknown_outcome"))
    found = await client.ledger.get_call(run_id, "t1.0")
    assert found is not None and found.state == "unresolved"
    return found


async def post_and_wait(
    client: CallgateClient, call: CallRecord, signer: Signer, **kw: Any
) -> Outcome | None:
    """A resolution posted straight onto the stream (no CLI pre-check): the validator's verdict."""
    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    after = await desk.last_event_id(call.run_id)
    message = await desk.resolve(call, kw.pop("outcome", "applied"), signer, **kw)
    return await desk.wait_outcome(message, after, 10)


async def reserve_stats(system: LocalSystem) -> tuple[int, dict[str, int]]:
    stats = await booking(system, "GET", "/_stats")
    return stats["reserve"]["requests"], stats["reservations_by_participant"]


@pytest.mark.parametrize("api", APIS)
async def test_applied_completes_with_the_confirmed_result_and_one_reservation(
    system: LocalSystem, client: CallgateClient, api: str
) -> None:
    call = await unresolved(system, client, api, "commit_then_drop")
    settings = system.settings
    bob = await post_and_wait(client, call, signer_of(settings, "bob"))
    assert bob is not None and not bob.applied and "resolver roles" in (bob.reason or "")
    mallory = Signer("carol", Ed25519PrivateKey.generate())
    forged = await post_and_wait(client, call, mallory)
    assert forged is not None and not forged.applied
    still = await client.ledger.get_call(call.run_id, call.call_id)
    assert still is not None and still.state == "unresolved"

    desk = ApprovalDesk(client.redis, client.keys, client.ledger)
    assert call.call_id in [c.call_id for c in await desk.unresolved() if c.run_id == call.run_id]
    code, said = await resolve(
        client,
        call.run_id,
        call.call_id,
        "applied",
        signer_of(settings, "carol"),
        result={"reservation_id": "r-ok"},
    )
    assert code == 0, said
    assert [c for c in await desk.unresolved() if c.run_id == call.run_id] == [], "inbox empty"
    view = await until(client, call.run_id, status("completed"))
    assert "r-ok" in view["final_text"], "the model was told the confirmed result"
    assert view["calls"][0]["reason"] == "applied, confirmed by carol"
    assert await reserve_stats(system) == (1, {"ws-200/p-alice": 1}), "nothing replayed"

    again = await post_and_wait(client, call, signer_of(settings, "carol"), outcome="not_applied")
    assert again is not None and not again.applied and "not unresolved" in (again.reason or "")
    code, _ = await resolve(
        client, call.run_id, call.call_id, "applied", signer_of(settings, "carol")
    )
    assert code == 3
    types = [e.type for e in await client.events(call.run_id)]
    assert types.count("call.resolved") == 1
    assert types.count("resolve.refused") == 2  # bob's, and the second answer


@pytest.mark.parametrize("api", APIS)
async def test_not_applied_tells_the_model_and_makes_no_reservation(
    system: LocalSystem, client: CallgateClient, api: str
) -> None:
    call = await unresolved(system, client, api, "unreachable")
    code, said = await resolve(
        client, call.run_id, call.call_id, "not_applied", signer_of(system.settings, "carol")
    )
    assert code == 0, said
    view = await until(client, call.run_id, status("completed"))
    assert "not_applied" in view["final_text"], "the model was told it did not happen"
    assert view["calls"][0]["state"] == "failed"
    assert await reserve_stats(system) == (1, {})


async def test_recheck_reconciles_once_the_service_answers(
    system: LocalSystem, client: CallgateClient
) -> None:
    call = await unresolved(system, client, "openai-chat", "commit_then_drop")
    await booking(system, "POST", "/_faults", {"lookup": None})
    code, said = await resolve(
        client, call.run_id, call.call_id, "recheck", signer_of(system.settings, "operator")
    )
    assert code == 0, said
    view = await until(client, call.run_id, status("completed"))
    assert view["calls"][0]["state"] == "succeeded"
    assert view["calls"][0]["reason"] == "reconciled: applied"
    assert await reserve_stats(system) == (1, {"ws-200/p-alice": 1})
