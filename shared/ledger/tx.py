"""`Tx`: a guarded batch of Redis writes that `apply.lua` runs all-or-nothing.

A step of the loop is "if these fields still hold these values, write all of this", e.g. a call
moves ``approved → executing`` and its event and outbox message are appended in the same
atomic step.  `Tx` only *builds* that batch (pure, no I/O); `Ledger.apply`
(`callgate.ledger.store`) sends it, in one EVALSHA with the steps that other tasks of the same
event loop issued meanwhile (`callgate.ledger.group`).  Every key of one Tx must hash to the same
Redis Cluster slot, which the key builder guarantees for one run (`callgate.keys`); mixing slots
raises at once, here, rather than as CROSSSLOT on a cluster in production.

Encoding: its keys, each once; its first argument is the batch's shape, five bytes an entry
after a four-byte header (the number of reads R and of guards G): the entry's code (its index
in `CODES`), its key's index among its keys and its number of arguments; then every entry's
arguments, one after another (`callgate.ledger.group` puts one or more such steps, and their
names, in one script call).  R reads
(``rd``: the fields of one key that guards look at, fetched with one HMGET) come first, then G
guards (a field's guard names its read slot where others name a key), then the ops.  Grouping
the reads here, not in the script, keeps the script's own work small: a command a script runs
costs Redis more than the Lua around it.  The arguments travel as they are and reach the script
as Redis's own strings, so the script parses no JSON: decoding one JSON argument was a fifth of
what a step cost Redis.  Packing each argument as its own RESP item costs the client more than
``orjson.dumps`` of them all did (13% more instructions to build and pack a step; one
MessagePack argument cost 5% more but saved Redis only two thirds as much): Redis is the one
process every worker shares, so it gets the cheaper end.  Values are stored as they are: text
as UTF-8, bytes unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from callgate.errors import TxRejectedError
from callgate.keys import slot_of

Value = str | bytes | int | float
"""What may be stored: str and bytes as they are, numbers in their decimal form."""
Arg = str | bytes

_MAX_ARGS_PER_OP = 1000
"""Lua's `unpack` has a small stack; larger writes are split into several ops of one kind."""
_MAX_KEYS = 0xFFFF
"""A key's index travels in two bytes of the shape."""
CODES = (
    "rd",
    "in",
    "nx",
    "ex",
    "fnx",
    "len",
    "hset",
    "hdel",
    "rpush",
    "xadd",
    "xaddcap",
    "xack",
    "expire",
    "persist",
    "zadd",
    "zaddnx",
    "zrem",
)
"""Every entry's code, by its number in the shape (1-based); `apply.lua` holds the same list."""
_CODE = {code: number for number, code in enumerate(CODES, start=1)}
_READ = _CODE["rd"]
_VOUCHED = 0x80
"""Set in an op's code when the ledger vouches for its key's type (`Tx.vouch`)."""


class Guard(NamedTuple):
    """One precondition: ``kind`` is ``in`` (field value ∈ values), ``nx``, ``ex``, ``fnx`` or
    ``len``.

    A tuple, not a frozen dataclass: a step builds a dozen, and a frozen dataclass sets
    each field through ``object.__setattr__``."""

    kind: str
    key: str
    field: str | None = None
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TxResult:
    """What one `Tx` did: all of it (``ok``) or nothing, because guard ``failed`` saw ``actual``."""

    ok: bool
    failed: Guard | None = None
    actual: str | None = None
    stream_ids: list[str] = field(default_factory=list)


def _arg(value: Value) -> Arg:
    if type(value) is str or type(value) is bytes:  # nearly every value: skip the rest
        return value
    if isinstance(value, bool):
        raise TypeError("booleans have no Redis form; store 0/1 or a string")
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot store {value!r}")
        return repr(value)
    raise TypeError(f"cannot store {type(value).__name__}")


class Tx:
    """Builder of one guarded atomic batch; methods return ``self`` so calls can chain."""

    def __init__(self, step: str = "tx") -> None:
        self.step = step
        """The named ledger step this batch is (`take_call`, …): sent beside the batch, so
        MONITOR and SLOWLOG show which step ran and `callgate bench` counts each step's cost."""
        self.keys: list[str] = []
        self._key_index: dict[str, int] = {}
        self._slot: int | None = None
        self._guard_args: list[tuple[int, int, int, tuple[str, ...], str | None]] = []
        """Each guard as (code, key index, position among its key's read fields or -1,
        values, field): its `Guard` is made only when asked for (`guards`)."""
        self._read_fields: dict[int, dict[str, int]] = {}
        """Key index → its guarded fields, in first-use order → their position."""
        self._op_shape: list[int] = []
        self._vouched: set[int] = set()
        self._op_args: list[Arg] = []
        self._hsets: dict[int, list[Arg]] = {}
        """Key index → fields of an HSET not appended yet: a step's HSETs of one key with no
        other op on it between them go as one (a run's token usage and its transition), one
        command fewer for the script to run."""
        self.ops = 0
        self.xadds = 0
        self._events: dict[str, tuple[int, list[tuple[str, bytes]]]] = {}
        """Stream → when its first event happened, and its events (`event`)."""
        self.applied: bool | None = None
        """Set when the script's reply is read (`result`): whether all of it was written."""

    def _key(self, key: str) -> int:
        index = self._key_index.get(key)
        if index is None:
            slot = slot_of(key)
            if self._slot is None:
                self._slot = slot
            elif slot != self._slot:
                raise ValueError(f"key {key!r} is in slot {slot}, this Tx is in slot {self._slot}")
            self.keys.append(key)
            index = self._key_index[key] = len(self.keys)
            if index > _MAX_KEYS:
                raise ValueError(f"a Tx of more than {_MAX_KEYS} keys")
        return index

    @property
    def slot(self) -> int | None:
        """The one cluster slot every key of this Tx hashes to (None while empty)."""
        return self._slot

    @property
    def guards(self) -> list[Guard]:
        """Every guard, in order: made when asked (a step whose guards hold never needs them)."""
        return [
            Guard(CODES[code - 1], self.keys[index - 1], field, values)
            for code, index, _, values, field in self._guard_args
        ]

    def _guard(self, guard: Guard) -> Tx:
        """A guard on a whole key (``nx``, ``ex``, ``len``); a field's goes by `_field_guard`."""
        index = self._key(guard.key)
        self._guard_args.append((_CODE[guard.kind], index, -1, guard.values, guard.field))
        return self

    def _field_guard(self, kind: str, key: str, field: str, values: tuple[str, ...]) -> Tx:
        """A guard on one field: its field joins its key's one HMGET.  Every step adds a dozen,
        so this is the one path with nothing looked up twice."""
        index = self._key_index.get(key) or self._key(key)
        fields = self._read_fields.get(index)
        if fields is None:
            fields = self._read_fields[index] = {}
        position = fields.setdefault(field, len(fields))
        self._guard_args.append((_CODE[kind], index, position, values, field))
        return self

    def _guard_entries(self) -> tuple[list[int], list[Arg]]:
        """The shape (header first) and arguments of the reads and guards: one read per key
        whose fields are guarded (first use first), then each guard in order.  A field's guard
        names its 1-based slot among all the fields read where another entry names its key, so
        its arguments are only the values it allows (one argument fewer to send and parse)."""
        reads, guards = len(self._read_fields), len(self._guard_args)
        shape = [reads >> 8, reads & 0xFF, guards >> 8, guards & 0xFF]
        args: list[Arg] = []
        first_slot: dict[int, int] = {}
        slot = 1
        for index, fields in self._read_fields.items():
            first_slot[index] = slot
            slot += len(fields)
            shape += _entry(_READ, index, len(fields))
            args += fields
        for code, index, position, values, _ in self._guard_args:
            shape += _entry(
                code, index if position < 0 else first_slot[index] + position, len(values)
            )
            args += values
        return shape, args

    def _op(self, code: str, key: str, args: list[Arg], step: int = 1) -> Tx:
        if not args:
            raise ValueError(f"{code} on {key!r} with nothing to write")
        number, index = _CODE[code], self._key_index.get(key) or self._key(key)
        if self._hsets and index in self._hsets:
            self._append_hset(index)
        if index in self._vouched:
            number |= _VOUCHED
        if len(args) <= _MAX_ARGS_PER_OP:  # nearly every op: no slicing, no loop
            self._op_shape += _entry(number, index, len(args))
            self._op_args += args
            self.ops += 1
            return self
        chunk = _MAX_ARGS_PER_OP - _MAX_ARGS_PER_OP % step
        for start in range(0, len(args), chunk):
            part = args[start : start + chunk]
            self._op_shape += _entry(number, index, len(part))
            self._op_args += part
            self.ops += 1
        return self

    # Guards: all are checked before anything is written.
    def expect(self, key: str, field: str, *allowed: str) -> Tx:
        """``HGET key field`` must be one of ``allowed`` (a missing field never matches)."""
        if not allowed:
            raise ValueError("expect() needs at least one allowed value")
        return self._field_guard("in", key, field, allowed)

    def expect_missing(self, key: str) -> Tx:
        """``key`` must not exist (create-once); on failure ``actual`` is its type."""
        return self._guard(Guard("nx", key))

    def expect_exists(self, key: str) -> Tx:
        """``key`` must exist (e.g. a run's event log: the run was created and has not expired);
        on failure ``actual`` is None."""
        return self._guard(Guard("ex", key))

    def expect_field_missing(self, key: str, field: str) -> Tx:
        """``field`` must not be set in hash ``key``; on failure ``actual`` is its value."""
        return self._field_guard("fnx", key, field, ())

    def expect_length(self, key: str, length: int) -> Tx:
        """List ``key`` must hold exactly ``length`` items; on failure ``actual`` is its length."""
        return self._guard(Guard("len", key, "", (str(length),)))

    def vouch(self, key: str) -> Tx:
        """The ledger guarantees ``key`` holds the type the following ops on it need (only the
        workers write it, and only with ops of that type: a partition's streams, a run's
        history), so the script need not ask its TYPE.  Never for a key another role can
        write with other commands: a run's event log (the api user's SETNX and ZADD reach
        it) keeps its check, so a planted wrong type is refused before the first write —
        unless the step's guards prove one of the run's records exists, which the log
        outlives (`LedgerBase._log_outlives`).  Vouches for the ops on ``key`` appended
        before, too."""
        index = self._key(key)
        if index not in self._vouched:
            self._vouched.add(index)
            shape = self._op_shape
            for at in range(0, len(shape), 5):
                if shape[at + 1] << 8 | shape[at + 2] == index:
                    shape[at] |= _VOUCHED
        return self

    # Ops, applied in order (per key) once every guard holds.
    def hset(self, key: str, mapping: Mapping[str, Value]) -> Tx:
        """Set fields of hash ``key``; joined with the step's HSET of it just before, if no
        other op on ``key`` came between (a later field of the same name wins, as in HSET)."""
        flat: list[Arg] = []
        for name, value in mapping.items():
            flat.append(name)
            flat.append(value if type(value) is str else _arg(value))
        if not flat:
            raise ValueError(f"hset on {key!r} with nothing to write")
        index = self._key_index.get(key) or self._key(key)
        pending = self._hsets.get(index)
        if pending is None:
            self._hsets[index] = flat
        else:
            pending += flat
        return self

    def _append_hset(self, index: int) -> None:
        self._op("hset", self.keys[index - 1], self._hsets.pop(index), step=2)

    def hdel(self, key: str, *fields: str) -> Tx:
        return self._op("hdel", key, list(fields))

    def rpush(self, key: str, *values: Value) -> Tx:
        return self._op("rpush", key, [_arg(v) for v in values])

    def xadd(self, stream: str, fields: Mapping[str, Value], *, cap: int | None = None) -> Tx:
        """Append one entry (id ``*``); its id is returned in `TxResult.stream_ids`.  With
        ``cap`` the stream keeps about that many entries (``MAXLEN ~``): for streams that
        may have no reader (notifications), never for the hot path's."""
        flat: list[Arg] = [] if cap is None else [str(int(cap))]
        for name, value in fields.items():
            flat += [name, _arg(value)]
        if len(flat) > _MAX_ARGS_PER_OP:
            raise ValueError("a stream entry of more than 500 fields")
        self.xadds += 1
        if cap is None:
            return self._op("xadd", stream, flat, step=2)
        return self._op("xaddcap", stream, flat)

    def event(self, stream: str, kind: str, payload: bytes, t_ms: int) -> Tx:
        """Append an event (its JSON ``payload``) to a run's log ``stream``.  A step's events
        go as one entry, written last (`callgate.records.entry_events` reads them): an XADD
        an event costs Redis more than the bytes it writes."""
        pending = self._events.get(stream)
        if pending is None:
            self._key(stream)  # its slot now: a step of events only is routed by it too
            self._events[stream] = (t_ms, [(kind, payload)])
        else:
            pending[1].append((kind, payload))
        return self

    def _write_events(self) -> None:
        for stream, (t_ms, events) in self._events.items():
            (kind, payload), rest = events[0], events[1:]
            entry: dict[str, Value] = {"t": t_ms, "type": kind, "d": payload}
            if rest:
                pairs = (b"[" + orjson.dumps(k) + b"," + p + b"]" for k, p in rest)
                entry["also"] = b"[" + b",".join(pairs) + b"]"
            self.xadd(stream, entry)
        self._events.clear()

    def xack(self, stream: str, group: str, *message_ids: str) -> Tx:
        """Settle delivered entries in the same step as the writes they caused."""
        return self._op("xack", stream, [group, *message_ids])

    def expire(self, key: str, seconds: int) -> Tx:
        if isinstance(seconds, bool) or seconds < 1:
            raise ValueError(f"expire needs a positive number of seconds, not {seconds!r}")
        return self._op("expire", key, [str(seconds)])

    def persist(self, key: str) -> Tx:
        """Remove ``key``'s expiry: a finished run that a person resumes lives on."""
        index = self._key(key)
        if index in self._hsets:
            self._append_hset(index)
        self._op_shape += _entry(_CODE["persist"], index, 0)
        self.ops += 1
        return self

    def zadd(self, key: str, mapping: Mapping[str, float], *, nx: bool = False) -> Tx:
        """With ``nx`` a member already there keeps its score (``ZADD NX``)."""
        flat: list[Arg] = []
        for member, score in mapping.items():
            flat += [_arg(float(score)), member]
        return self._op("zaddnx" if nx else "zadd", key, flat, step=2)

    def zrem(self, key: str, *members: Value) -> Tx:
        return self._op("zrem", key, [_arg(m) for m in members])

    def encode(self) -> tuple[list[str], list[Arg]]:
        """Its keys and its arguments (the shape, then every entry's arguments), as a step of
        a script call (`callgate.ledger.group` puts one or more in one)."""
        for index in list(self._hsets):
            self._append_hset(index)
        if self._events:
            self._write_events()
        shape, args = self._guard_entries()
        shape += self._op_shape
        return self.keys, [bytes(shape), *args, *self._op_args]

    def result(self, reply: Any) -> TxResult:
        """Read the script's reply for this Tx."""
        if not isinstance(reply, list) or not reply:
            raise TxRejectedError(f"unexpected script reply {reply!r:.200}")
        self.applied = reply[0] == 1
        if reply[0] == 1:
            ids = reply[1]
            assert isinstance(ids, list)
            return TxResult(ok=True, stream_ids=[_text(i) for i in ids])
        index = reply[1]
        assert isinstance(index, int)
        actual = reply[2] if len(reply) > 2 else None
        return TxResult(
            ok=False,
            failed=self.guards[index - 1],  # made here: a failure is the rare case
            actual=None if actual is None else _text(actual),
        )


def _entry(code: int, key_index: int, count: int) -> tuple[int, int, int, int, int]:
    """One entry of the shape: its code, its key's index, its number of arguments."""
    return code, key_index >> 8, key_index & 0xFF, count >> 8, count & 0xFF


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
