"""How a record's fields are stored in its Redis hash: one field each, the codec chosen from
the field's type (``str``, enums and literals as they are, ``int`` in decimal, anything else
as orjson; ``None`` is an absent field).

Every ledger step encodes a dozen values (its guards, its updates), so the common ones are
encoded without pydantic where its check could not refuse them and its dump would give the
same bytes; anything else goes through the field's own pydantic type.  Pure; no I/O.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from functools import cache
from typing import Annotated, Any, Literal

import orjson
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, TypeAdapter

HashValue = str | bytes


def encode_value(kind: str, value: Any) -> HashValue:
    """One JSON-mode value (enums already their strings) to its hash form."""
    return orjson.dumps(value) if kind == "json" else str(value)


def decode_value(kind: str, text: str) -> Any:
    if kind == "int":
        return int(text)
    return orjson.loads(text) if kind == "json" else text


def encode_fields(
    model: type[BaseModel], values: Mapping[str, Any]
) -> tuple[dict[str, HashValue], list[str]]:
    """Validate a partial update and encode it: (fields to HSET, fields to HDEL because None).

    Raises ``ValueError`` for a field the record does not have or a value of the wrong type.
    """
    codecs = _codecs(model)
    to_set: dict[str, HashValue] = {}
    to_delete: list[str] = []
    for name, value in values.items():
        codec = codecs.get(name)
        if codec is None:
            raise ValueError(f"{model.__name__} has no field {name!r}")
        kind, shortcut, nullable = codec
        if value is None and nullable:
            to_delete.append(name)
            continue
        encoded = None if shortcut is None else shortcut(value)
        if encoded is not None:
            to_set[name] = encoded
            continue
        adapter = _adapter(model, name)
        checked = adapter.validate_python(value)
        if checked is None:
            to_delete.append(name)
        else:
            to_set[name] = encode_value(kind, adapter.dump_python(checked, mode="json"))
    return to_set, to_delete


@cache
def _codecs(
    model: type[BaseModel],
) -> dict[str, tuple[str, Callable[[Any], HashValue | None] | None, bool]]:
    """Field name → (codec, pydantic-free encoder, whether None clears it): one lookup a
    field, where every step encodes a dozen."""
    kinds = kinds_of(model)
    return {
        name: (kinds[name], _shortcut(model, name), _optional(info.annotation)[1])
        for name, info in model.model_fields.items()
    }


def _optional(annotation: Any) -> tuple[Any, bool]:
    """The one type a field's annotation names besides None (None when it names several or
    none), and whether it admits None."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return annotation, False
    rest = [a for a in typing.get_args(annotation) if a is not type(None)]
    return (rest[0] if len(rest) == 1 else None), len(rest) < len(typing.get_args(annotation))


@cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """The field's type with its constraints and validators, to check one value alone."""
    info = model.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    return TypeAdapter(annotation)


@cache
def _shortcut(model: type[BaseModel], name: str) -> Callable[[Any], HashValue | None] | None:
    """How to encode, without pydantic, the values of a field that need no check beyond
    their type: exact ``str``, ``int`` or enum values, a string a ``Literal`` allows, a list
    of strings.  The encoder returns None for any other value (pydantic then decides).
    Every step of every call encodes several such fields."""
    info = model.model_fields[name]
    annotation, _ = _optional(info.annotation)
    if annotation is None:
        return None
    if info.metadata:
        return _within_bounds(annotation, info.metadata)
    if annotation in (str, int):
        exact = annotation
        return lambda value: str(value) if type(value) is exact else None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        enum = annotation
        named = frozenset(m.value for m in enum if isinstance(m.value, str))
        return lambda value: (
            str(value.value)
            if type(value) is enum
            else value
            if type(value) is str and value in named
            else None
        )
    if typing.get_origin(annotation) is Literal:
        allowed = frozenset(a for a in typing.get_args(annotation) if isinstance(a, str))
        return lambda value: value if type(value) is str and value in allowed else None
    if annotation == list[str]:
        return _string_list
    if annotation == dict[str, Any]:
        return _plain_object
    return None


def _within_bounds(annotation: Any, metadata: list[Any]) -> Callable[[Any], str | None] | None:
    """An exact ``str`` within its length bounds, an exact ``int`` within its bounds, as they
    are; None (pydantic decides) for any other constraint or value."""
    kinds = {type(m) for m in metadata}
    if annotation is str and kinds <= {MinLen, MaxLen}:
        low = max((m.min_length for m in metadata if type(m) is MinLen), default=0)
        high = min((m.max_length for m in metadata if type(m) is MaxLen), default=None)
        return lambda v: (
            v if type(v) is str and low <= len(v) and (high is None or len(v) <= high) else None
        )
    if annotation is int and kinds <= {Ge, Gt, Le, Lt}:
        bounds = [
            (getattr(m, "ge", None), getattr(m, "gt", None), getattr(m, "le", None),
             getattr(m, "lt", None))
            for m in metadata
        ]  # fmt: skip
        return lambda v: str(v) if type(v) is int and all(_holds(v, *b) for b in bounds) else None
    return None


def _holds(v: int, ge: Any, gt: Any, le: Any, lt: Any) -> bool:
    return (
        (ge is None or v >= ge)
        and (gt is None or v > gt)
        and (le is None or v <= le)
        and (lt is None or v < lt)
    )


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_object(value: Any) -> bytes | None:
    """A dict of JSON's own types only, encoded as pydantic's check and dump would (an
    identity, a call's arguments); None for anything else, which pydantic then decides."""
    if type(value) is not dict or not _plain(value):
        return None
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits
        return None


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _plain(item) for key, item in value.items())
    if kind is list:
        return all(_plain(item) for item in value)
    return kind in _JSON_SCALARS


def _string_list(value: Any) -> bytes | None:
    if type(value) in (list, tuple) and all(type(item) is str for item in value):
        return orjson.dumps(list(value))
    return None


@cache
def kinds_of(model: type[BaseModel]) -> dict[str, str]:
    """Field name → codec (``str``, ``int`` or ``json``), read from the annotations."""
    return {name: _kind(info.annotation) for name, info in model.model_fields.items()}


def _kind(annotation: Any) -> str:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _kind(rest[0]) if len(rest) == 1 else "json"
    if typing.get_origin(annotation) is Literal:
        return "str" if all(isinstance(a, str) for a in args) else "json"
    if isinstance(annotation, type) and issubclass(annotation, str):
        return "str"
    if annotation is int:
        return "int"
    return "json"
