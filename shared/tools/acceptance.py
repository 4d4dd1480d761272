"""Acceptance checks for a run's final answer.

A run may carry ``acceptance``: ``{"json_schema": {...}}`` (the answer must be a JSON object
valid against a pydantic-compatible schema of required keys and types),
``{"contains": ["text", ...]}``, or ``{"validator": NAME}``: a function ``(text) -> str | None``
(the reason the answer is not acceptable) that the deployment registered under NAME in a tool
module's ``ACCEPTANCE`` mapping (`callgate.tools.registry`).  A run only names one; it never
says where code is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


def check_acceptance(
    acceptance: dict[str, Any] | None,
    text: str,
    validators: Mapping[str, Callable[[str], str | None]],
) -> str | None:
    """None if ``text`` is acceptable, else the reason (told to the model).  ``validators`` are
    the deployment's registered ones; a run was refused at creation if it named another."""
    if not acceptance:
        return None
    if "contains" in acceptance:
        missing = [s for s in acceptance["contains"] if s not in text]
        return f"the answer must mention: {', '.join(missing)}" if missing else None
    if "json_schema" in acceptance:
        return _check_json(acceptance["json_schema"], text)
    if "validator" in acceptance:
        validator = validators.get(str(acceptance["validator"]))
        if validator is None:
            return f"acceptance validator {acceptance['validator']!r} is not registered"
        return validator(text)
    return f"unknown acceptance rule {sorted(acceptance)}"


def _check_json(schema: dict[str, Any], text: str) -> str | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "the answer must be a JSON object"
    if not isinstance(value, dict):
        return "the answer must be a JSON object"
    for name in schema.get("required", []):
        if name not in value:
            return f"the answer is missing the field {name!r}"
    for name, prop in schema.get("properties", {}).items():
        expected = _TYPES.get(prop.get("type", ""))
        if name in value and expected is not None and not isinstance(value[name], expected):
            return f"the field {name!r} must be of type {prop['type']}"
    return None
