"""A schedule is the list of every choice the explorer made, in order, each by name: the event
it picked (``e:`` and its label) or the answer a tool, the model or a person gave (``a:``).

Exploring, each choice is drawn from a seeded generator (by weights, so runs get somewhere,
and toward the fault-free answer); replaying, it is read back from the list, by name, so the
same list makes the same events.  Names rather than positions keep a shrunk list meaningful:
an event whose choice is dropped no longer shifts the ones after it.  A recorded event that is
not possible when its turn comes is skipped, a missing answer is the fault-free one, and a list
that ends ends the schedule's fault phase: what follows is the fault-free drain.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

CLEAN_ANSWER_BIAS = 0.6
"""How often a tool or the model gives its fault-free answer."""
EVENT, ANSWER = "e:", "a:"


class Choices:
    def __init__(self, recorded: Sequence[str] = (), rng: random.Random | None = None) -> None:
        self.recorded = list(recorded)
        self.rng = rng
        self.taken: list[str] = []
        self.faults_on = True
        self._next = 0

    @property
    def exhausted(self) -> bool:
        """Replaying, and every recorded choice is used up."""
        return self.rng is None and self._next >= len(self.recorded)

    def event(self, labels: Sequence[str], weights: Sequence[float]) -> int | None:
        """The index of the next event among ``labels`` (None: replaying, none is left)."""
        if self.rng is not None:
            index: int | None = self.rng.choices(range(len(labels)), weights)[0]
        else:
            index = self._replayed_event(labels)
        if index is not None:
            self.taken.append(EVENT + labels[index])
        return index

    def _replayed_event(self, labels: Sequence[str]) -> int | None:
        while self._next < len(self.recorded):
            token = self.recorded[self._next]
            self._next += 1
            if token.startswith(EVENT) and token[len(EVENT) :] in labels:
                return labels.index(token[len(EVENT) :])
        return None

    def answer(
        self, label: str, options: Sequence[str], weights: Sequence[float] | None = None
    ) -> str:
        """A tool's, the model's or a person's answer; the first option once faults are off
        (exploring, drawn by ``weights``, else the first with `CLEAN_ANSWER_BIAS`)."""
        if not self.faults_on or len(options) == 1:
            return options[0]
        if self.rng is not None:
            chosen = self._drawn(options, weights)
        else:
            replayed = self._replayed_answer(options)
            if replayed is None:
                return options[0]  # not recorded: the fault-free answer, as a drain gives
            chosen = replayed
        self.taken.append(ANSWER + chosen)
        return chosen

    def _drawn(self, options: Sequence[str], weights: Sequence[float] | None) -> str:
        assert self.rng is not None
        if weights is not None:
            return self.rng.choices(options, weights)[0]
        clean = self.rng.random() < CLEAN_ANSWER_BIAS
        return options[0] if clean else self.rng.choice(options)

    def _replayed_answer(self, options: Sequence[str]) -> str | None:
        if self._next < len(self.recorded) and self.recorded[self._next].startswith(ANSWER):
            token = self.recorded[self._next][len(ANSWER) :]
            self._next += 1
            if token in options:
                return token
        return None
