"""The last approval of a batch releases what the batch held, and nothing that went out
already: a read (allowed or approved) went out when decided, and under ``run_allowed`` an
allowed write went out at once or waits in its resource's chain.  A second exec order for one
of those would run a read twice, or a chained write out of its order while the chain's own
order for it is still to come.  On a real Redis, the ledger's own steps; what the decision
sends is read off the exec stream."""

from __future__ import annotations

import pytest

from callgate.envelopes import ExecRequest, decode
from callgate.ledger.approval_steps import Decider
from callgate.records import BatchPolicy
from callgate.states import CallState, RunState
from callgate.streams.service import Runtime
from callgate.tools.contract import Effect
from tests.integration.turn_seed import seed_turn

C, E = CallState, Effect


async def exec_orders(runtime: Runtime, run_id: str) -> list[str]:
    entries = await runtime.redis.xrange(runtime.keys.run_stream("exec", run_id))
    orders = [decode(f[b"d"]) for _, f in entries]
    return [o.call_id for o in orders if isinstance(o, ExecRequest) and o.run_id == run_id]


@pytest.mark.parametrize(
    ("policy", "sent"), [("run_allowed", ["t1.0"]), ("hold_effects", ["t1.0", "t1.2"])]
)
async def test_the_last_approval_sends_only_what_its_batch_held(
    runtime: Runtime, policy: BatchPolicy, sent: list[str]
) -> None:
    run_id = f"release-{policy}"
    calls = [
        (C.NEEDS_APPROVAL, E.WRITE, "seat"),  # the approval being decided
        (C.EXECUTING, E.WRITE, "postcard"),  # a chain's head, out already (run_allowed)
        (C.ALLOWED, E.WRITE, "postcard"),  # chained behind it, or held (hold_effects)
        (C.APPROVED, E.READ, "r3"),  # approved earlier: went out then
        (C.ALLOWED, E.READ, "r4"),  # went out when decided
    ]
    [approval] = await seed_turn(runtime, run_id, RunState.PAUSED_APPROVAL, calls, policy)
    ledger = runtime.ledger
    decider = Decider("carol", "carol", "token", f"jti-{run_id}")
    tx = ledger.apply_approval(
        approval, C.APPROVED, await ledger.turn_calls(run_id, 1), msg_id="m-1",
        decider=decider, reason=None, policy=policy,
    )  # fmt: skip
    assert (await ledger.apply(tx)).ok
    assert sorted(await exec_orders(runtime, run_id)) == sent
    run = await ledger.get_run(run_id)
    assert run is not None and run.status == RunState.EXECUTING
