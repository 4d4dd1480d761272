"""Turn a pydantic argument model into the one schema all three providers accept.

pydantic's ``model_json_schema`` puts nested models under ``$defs`` and points at them with
``$ref``; OpenAI's strict function schemas, Chat Completions and Anthropic ``input_schema``
all take a plain object schema most reliably, so references are inlined and the noise of
generated ``title`` keys is dropped.  Recursive models cannot be inlined and are refused at
tool-definition time rather than on the first model request.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_LITERAL_KEYS = frozenset({"default", "enum", "const", "examples"})
"""Keys whose values are data, not schemas: copied as they are."""


def to_tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The self-contained object schema of ``model`` with ``additionalProperties: false``."""
    raw = model.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    schema = _inline(raw, defs, ())
    if schema.get("type") != "object":
        raise ValueError(f"{model.__name__}: tool arguments must be an object schema")
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _inline(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            raise ValueError(f"cannot inline schema reference {ref!r} (recursive or missing)")
        # Sibling keys of a $ref (e.g. a field's description) override the target's.
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _LITERAL_KEYS:
            out[key] = value
        elif key == "properties" and isinstance(value, dict):
            out[key] = {prop: _inline_any(sub, defs, seen) for prop, sub in value.items()}
        else:
            out[key] = _inline_any(value, defs, seen)
    return out


def _inline_any(value: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return _inline(value, defs, seen)
    if isinstance(value, list):
        return [_inline_any(v, defs, seen) for v in value]
    return value
