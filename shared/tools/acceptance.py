"""Acceptance checks for a run's final answer.

A run may carry ``acceptance``: ``{"json_schema": {...}}`` (the answer must be a JSON object
valid against a pydantic-compatible schema of required keys and types),
``{"contains": ["text", ...]}``, or ``{"validator": NAME}``: a function ``(text) -> str | None``
(the reason the answer is not acceptable) that the deployment registered under NAME in a tool
module's ``ACCEPTANCE`` mapping (`callgate.tools.registry`).  A run only names one; it never
says where code is.  `AcceptanceRule` types these shapes, so a rule this module could not
check is refused when the run is submitted, not after its tools ran.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, assert_never

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
)

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}
ACCEPTANCE_RULES = ("contains", "json_schema", "validator")
_VALIDATOR_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _validator_name(name: str) -> str:
    if not _VALIDATOR_NAME.match(name):
        raise ValueError(
            f"names a validator the deployment registered, never code to "
            f"import: {name!r} is not such a name"
        )
    return name


class _Rule(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class PropertySchema(BaseModel):
    """One property of a `JsonSchema`: only its ``type`` is checked; other keywords ride along."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    type: Literal["string", "integer", "number", "boolean", "object", "array"] | None = None


class JsonSchema(BaseModel):
    """The part of a JSON schema the check reads: required keys and property types."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    required: list[str] | None = Field(default=None, max_length=256)
    properties: dict[str, PropertySchema] | None = Field(default=None, max_length=256)


class ContainsRule(_Rule):
    """The answer must mention every one of these texts."""

    contains: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1, max_length=256)


class JsonSchemaRule(_Rule):
    """The answer must be a JSON object with the schema's required keys and types."""

    json_schema: JsonSchema


class ValidatorRule(_Rule):
    """A validator the deployment registered, by name (never code to import)."""

    validator: Annotated[str, AfterValidator(_validator_name)]


def _rule_tag(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        return next(iter(type(value).model_fields))
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ACCEPTANCE_RULES:
        return str(next(iter(value)))
    return None


AcceptanceRule = Annotated[
    Annotated[ContainsRule, Tag("contains")]
    | Annotated[JsonSchemaRule, Tag("json_schema")]
    | Annotated[ValidatorRule, Tag("validator")],
    Discriminator(
        _rule_tag,
        custom_error_type="acceptance_rule",
        custom_error_message=f"acceptance must be exactly one of {list(ACCEPTANCE_RULES)}",
    ),
]
"""A run's acceptance rule, as `RunSpec.acceptance` types it."""
_RULE: TypeAdapter[ContainsRule | JsonSchemaRule | ValidatorRule] = TypeAdapter(AcceptanceRule)


def check_acceptance(
    acceptance: dict[str, Any] | None,
    text: str,
    validators: Mapping[str, Callable[[str], str | None]],
) -> str | None:
    """None if ``text`` is acceptable, else the reason (told to the model).  ``validators`` are
    the deployment's registered ones; a run was refused at creation if it named another."""
    if not acceptance:
        return None
    try:
        rule = _RULE.validate_python(acceptance)
    except ValidationError:
        return f"unknown acceptance rule {sorted(acceptance)}"
    if isinstance(rule, ContainsRule):
        missing = [s for s in rule.contains if s not in text]
        return f"the answer must mention: {', '.join(missing)}" if missing else None
    if isinstance(rule, JsonSchemaRule):
        return _check_json(rule.json_schema, text)
    if isinstance(rule, ValidatorRule):
        validator = validators.get(rule.validator)
        if validator is None:
            return f"acceptance validator {rule.validator!r} is not registered"
        return validator(text)
    assert_never(rule)


def _check_json(schema: JsonSchema, text: str) -> str | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "the answer must be a JSON object"
    if not isinstance(value, dict):
        return "the answer must be a JSON object"
    for name in schema.required or []:
        if name not in value:
            return f"the answer is missing the field {name!r}"
    for name, prop in (schema.properties or {}).items():
        expected = _TYPES.get(prop.type or "")
        if name in value and expected is not None and not isinstance(value[name], expected):
            return f"the field {name!r} must be of type {prop.type}"
    return None
