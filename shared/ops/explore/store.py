"""The explorer's system of record and its tools: ordinary registered callgate tools whose
service is an in-process store with its own truth and effect counter.

Every request a tool sends is a `Dispatch` the invariants read (which call, under which
operation id and arguments, what the ledger said at that moment); how the service answers is
the schedule's choice (`Outcomes`): ok, a tool error, an exception, the effect committed and
its answer lost, a timeout before anything happened, or the service down.  The lookup a write
reconciles with answers from the store's truth, or fails while the service is down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from callgate.errors import ToolError
from callgate.records import Effect
from callgate.tools.canonical import args_hash
from callgate.tools.contract import Identity, Reconciliation, Tool, ToolContext

APPROVER_ROLE = "events-lead"
READ_OUTCOMES = ("ok", "tool_error", "raised", "timeout", "down")
WRITE_OUTCOMES = ("ok", "tool_error", "raised", "committed_answer_lost", "timeout", "down")
LOOKUP_OUTCOMES = ("truth", "down")
TOOL_NAMES = ("look", "reserve", "transfer", "hold")

Choose = Callable[[str, Sequence[str]], str]
"""What the schedule answers when a tool asks (a label and the options; the first is the
fault-free one)."""
Probe = Callable[[ToolContext], Awaitable[dict[str, Any]]]
"""What the ledger says about a call at the moment its request goes out."""


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item: str


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One request that reached the service."""

    tool: str
    effect: Effect
    run_id: str
    call_id: str
    operation_id: str
    args_hash: str
    seen: dict[str, Any]
    """The probe's answer: run status, call state, its approval and that approval's record."""


@dataclass
class Store:
    """The service's truth: effects by operation id, and every request it received."""

    choose: Choose
    probe: Probe
    down: bool = False
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)
    dispatches: list[Dispatch] = field(default_factory=list)

    def reset(self) -> None:
        """Up again, with no effects and no requests: a new episode's service."""
        self.down = False
        self.effects.clear()
        self.created.clear()
        self.requests.clear()
        self.dispatches.clear()

    async def serve(self, tool: Tool[Any], ctx: ToolContext, args: Item, op: str) -> dict[str, Any]:
        """Answer one request as the schedule chooses."""
        options = READ_OUTCOMES if tool.effect is Effect.READ else WRITE_OUTCOMES
        outcome = "down" if self.down else self.choose(f"{tool.name} {ctx.call_id}", options)
        if outcome == "down":
            raise ConnectionRefusedError("the service is down")
        seen = await self.probe(ctx)
        self.dispatches.append(
            Dispatch(
                tool.name,
                tool.effect,
                ctx.run_id,
                ctx.call_id,
                op,
                args_hash(args.model_dump()),
                seen,
            )
        )
        if tool.effect is not Effect.READ:
            self.requests[op] += 1
        if outcome == "timeout":
            raise TimeoutError("no answer in time")
        if outcome == "tool_error" and op not in self.effects:
            # A service that honours the operation id answers a committed one with its result.
            raise ToolError(f"{args.item} is not available", code="out_of_stock")
        if outcome == "raised":
            raise RuntimeError("the tool's own code failed")
        payload = {"item": args.item, "call": ctx.call_id}
        if tool.effect is not Effect.READ:
            payload = self._commit(op, payload)
        if outcome == "committed_answer_lost":
            raise TimeoutError("committed, then the answer was lost")
        return payload

    def _commit(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The effect, once per operation id (a repeat finds the first one's result)."""
        if op not in self.effects:
            self.effects[op] = payload
            self.created[op] += 1
        return self.effects[op]

    async def look_up(self, ctx: ToolContext, op: str) -> Reconciliation:
        if self.down or self.choose(f"lookup {ctx.call_id}", LOOKUP_OUTCOMES) == "down":
            raise ConnectionRefusedError("the service is down")
        found = self.effects.get(op)
        return Reconciliation("not_applied") if found is None else Reconciliation("applied", found)


def tools(store: Store) -> list[Tool[Any]]:
    """``look`` (a read), ``reserve`` (a write), ``transfer`` (a write that needs an
    events-lead's approval) and ``hold`` (an idempotent write), all on the one store."""

    def serving(name: str) -> Callable[[ToolContext, Item, str], Awaitable[dict[str, Any]]]:
        async def execute(ctx: ToolContext, args: Item, op: str) -> dict[str, Any]:
            return await store.serve(made[name], ctx, args, op)

        return execute

    async def reconcile(ctx: ToolContext, args: Item, op: str) -> Reconciliation:
        return await store.look_up(ctx, op)

    def by_lead(identity: Identity, args: Item) -> str | None:
        return APPROVER_ROLE

    def common(name: str, effect: Effect) -> dict[str, Any]:
        return {
            "name": name,
            "version": "1",
            "description": f"explorer {name}",
            "args_model": Item,
            "effect": effect,
            "execute": serving(name),
            "resource_key": lambda args: args.item,
        }

    made: dict[str, Tool[Any]] = {
        "look": Tool(**common("look", Effect.READ)),
        "reserve": Tool(**common("reserve", Effect.WRITE), reconcile=reconcile),
        "transfer": Tool(**common("transfer", Effect.WRITE), reconcile=reconcile, approval=by_lead),
        "hold": Tool(**common("hold", Effect.IDEMPOTENT_WRITE)),
    }
    return list(made.values())
