"""A strict argument model from an MCP tool's JSON schema (README: Tools from MCP servers).

An MCP server describes a tool's arguments as JSON schema.  A callgate `Tool` validates with a
pydantic model, strictly and with unknown fields refused, so the schema becomes such a model
for the subset tool schemas use: an object of strings, integers, numbers, booleans, arrays,
free objects, enums and nullable fields, with the usual length, range and pattern limits.
Anything else (a ``$ref``, ``oneOf``, a type list) is refused: the tool is not registered,
rather than validated more loosely than a local tool.  The model sees the server's schema
(``additionalProperties: false`` added); the generated model's `model_json_schema` returns it.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = ["SchemaError", "args_model_from_schema"]

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}
_LIMITS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minItems": "min_length",
    "maxItems": "max_length",
}
_IGNORED = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "type",
        "enum",
        "items",
        "anyOf",
        "additionalProperties",
        "properties",
        "required",
        "$schema",
    }
)


class SchemaError(ValueError):
    """A tool's input schema uses something callgate cannot validate as strictly as its own."""


def args_model_from_schema(tool_name: str, schema: dict[str, Any]) -> type[BaseModel]:
    """The ``extra='forbid'`` model of ``schema``'s object; raises `SchemaError`."""
    if schema.get("type") != "object":
        raise SchemaError(f"{tool_name}: input schema must be an object")
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    fields: dict[str, Any] = {}
    for name, sub in properties.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise SchemaError(f"{tool_name}: argument name {name!r} is not supported")
        annotation = _annotation(tool_name, name, sub)
        limits = {_LIMITS[k]: v for k, v in sub.items() if k in _LIMITS}
        unknown = set(sub) - _IGNORED - set(_LIMITS)
        if unknown:
            raise SchemaError(f"{tool_name}.{name}: unsupported keywords {sorted(unknown)}")
        if name in required:
            fields[name] = (annotation, Field(..., **limits))
        else:
            fields[name] = (annotation | None, Field(copy.deepcopy(sub.get("default")), **limits))
    try:
        model = create_model(
            f"Mcp_{tool_name}_Args", __config__=ConfigDict(extra="forbid"), **fields
        )
    except (TypeError, ValueError) as exc:  # e.g. a limit that does not fit its type
        raise SchemaError(f"{tool_name}: {exc}") from exc
    shown = _shown(schema)

    def model_json_schema(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(shown)

    model.model_json_schema = staticmethod(model_json_schema)  # type: ignore[method-assign]
    return model


_NESTED = frozenset({"type", "title", "description", "enum", "anyOf", "items", "format"})
"""What an array's items or an 'X or null' option may say: their limits would be dropped."""


def _annotation(tool_name: str, name: str, sub: Any, *, nested: bool = False) -> Any:
    where = f"{tool_name}.{name}"
    if not isinstance(sub, dict):
        raise SchemaError(f"{where}: schema must be an object")
    if nested and set(sub) - _NESTED:
        raise SchemaError(f"{where}: limits inside items or unions are not supported")
    if "enum" in sub:
        values = sub["enum"]
        if not values or not all(isinstance(v, str | int | bool) for v in values):
            raise SchemaError(f"{where}: enum must list strings, integers or booleans")
        return Literal[tuple(values)]
    if "anyOf" in sub:
        options = [o for o in sub["anyOf"] if o != {"type": "null"}]
        if len(options) != 1 or len(sub["anyOf"]) != 2:
            raise SchemaError(f"{where}: only 'X or null' unions are supported")
        return _annotation(tool_name, name, options[0], nested=True) | None
    kind = sub.get("type")
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        items = sub.get("items")
        if items is None:
            return list[Any]
        return list[_annotation(tool_name, name, items, nested=True)]  # type: ignore[misc]
    if kind == "object" and not sub.get("properties"):
        return dict[str, Any]
    raise SchemaError(f"{where}: type {kind!r} is not supported")


def _shown(schema: dict[str, Any]) -> dict[str, Any]:
    """What the model is told: the server's schema, closed to unknown fields, no titles."""
    shown = {k: copy.deepcopy(v) for k, v in schema.items() if k not in ("title", "$schema")}
    shown["properties"] = {
        name: {k: v for k, v in sub.items() if k != "title"}
        for name, sub in (schema.get("properties") or {}).items()
    }
    shown["additionalProperties"] = False
    return shown
