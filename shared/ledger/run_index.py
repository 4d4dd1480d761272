"""A run's index: one hash (`Keys.run_index`) naming what the run made.

Its fields: ``t:<turn>`` → that turn's call ids in provider order (a JSON list),
``p:<provider call id>`` → the call carrying it, ``a:<approval id>`` → the call it was asked
for.  One key per run instead of a list per turn and a hash of provider ids, so

* one HGETALL finds every key a run's end must expire (its calls and approvals), where it took
  a list read per turn and a read per call, and the end expires one key instead of a turn's;
* a turn's calls are created in the step that writes the turn's field, guarded on it missing:
  found missing, none of the turn's call records exists, so creating one asks no ``EXISTS``
  (`LedgerBase.create_calls`); only the workers write either key.

The prefixes keep a provider's call id, whatever text it is, from naming a turn or an approval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from callgate.ledger.tx import Guard

TURN, PROVIDER, APPROVAL = "t:", "p:", "a:"


def turn_field(turn: int) -> str:
    return f"{TURN}{turn}"


def provider_field(provider_call_id: str) -> str:
    return f"{PROVIDER}{provider_call_id}"


def approval_field(approval_id: str) -> str:
    return f"{APPROVAL}{approval_id}"


def reused_provider_id(failed: Guard | None, index: str) -> bool:
    """Whether a step was refused for a provider call id the run (index ``index``) already
    used, rather than for its turn's calls existing already (a lost race)."""
    if failed is None or failed.key != index:
        return False
    return (failed.field or "").startswith(PROVIDER)


def turn_call_ids(raw: bytes | str | None) -> list[str]:
    """A turn field's value as call ids ([] for a turn that made none)."""
    return [] if raw is None else [str(call_id) for call_id in orjson.loads(raw)]


@dataclass(frozen=True, slots=True)
class RunIndex:
    """A run's index as read: its turns' call ids and its approvals."""

    turns: dict[int, list[str]]
    approval_ids: list[str]

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> RunIndex:
        turns: dict[int, list[str]] = {}
        approval_ids: list[str] = []
        for name, value in raw.items():
            field = name.decode()
            if field.startswith(TURN):
                turns[int(field.removeprefix(TURN))] = turn_call_ids(value)
            elif field.startswith(APPROVAL):
                approval_ids.append(field.removeprefix(APPROVAL))
        return cls(turns, sorted(approval_ids))

    def call_ids(self, last_turn: int | None = None) -> list[str]:
        """Every call id (of turns up to ``last_turn``), in turn and provider order."""
        turns = sorted(t for t in self.turns if last_turn is None or t <= last_turn)
        return [call_id for turn in turns for call_id in self.turns[turn]]
