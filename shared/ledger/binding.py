"""Binding a step to facts: guards derived from a facts type's own fields.

A step that relies on what a message says was recorded (`callgate.facts`) checks it in the
same atomic step: every field of the facts must hold exactly that value in the record (absent
where None), encoded as the record stores it.  `Binding` remembers which guards those were,
so a step that failed one of them is told apart from one that lost a race.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from callgate.facts import RecordFacts
from callgate.hash_fields import encode_fields
from callgate.ledger.tx import Tx, TxResult


@dataclass
class Binding:
    """The guards `bind` added: a step that failed one of them met other facts, not a race."""

    guards: set[tuple[str, str]] = field(default_factory=set)

    def broken(self, result: TxResult) -> bool:
        failed = result.failed
        return failed is not None and (failed.key, failed.field or "") in self.guards


def bind(tx: Tx, key: str, facts: RecordFacts, binding: Binding | None = None) -> Binding:
    """Guard ``tx`` on record ``key`` holding exactly ``facts`` (absent where None), encoded as
    the record stores them.  `ValueError` for a value no record could hold."""
    binding = binding or Binding()
    to_set, missing = encode_fields(facts.record, facts.values())
    for name, encoded in to_set.items():
        tx.expect(key, name, encoded.decode() if isinstance(encoded, bytes) else encoded)
        binding.guards.add((key, name))
    for name in missing:
        tx.expect_field_missing(key, name)
        binding.guards.add((key, name))
    return binding
