"""A `Tool` from a typed ``async def``, beside the `Tool(...)` constructor.

    @tool(effect=Effect.READ)
    async def get_weather(ctx: ToolContext, city: str, date: IsoDate | None = None) -> dict:
        '''Current weather for a city.

        Args:
            city: City name, e.g. Hangzhou.
            date: Day to forecast (YYYY-MM-DD); today when omitted.
        '''

The signature becomes the argument model: after ``ctx: ToolContext``, every parameter is a
field (``Annotated[..., Field(...)]`` honoured) except ``operation_id: str``, which receives
the idempotency key.  Field descriptions come from the docstring's ``Args:`` (numpy
``Parameters`` and reST ``:param x:`` too) unless a ``Field`` has its own; the rest of the
docstring is the tool description.  Hooks receive an instance of the generated model (type
their ``args`` as ``Any``: its class exists only at run time).  `Tool.execute` calls the
function with the validated fields as keyword arguments, so the function stays plain code;
`function_of` returns it for unit tests of its own logic.
"""

from __future__ import annotations

import inspect
import re
import textwrap
import typing
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from callgate.tools.contract import (
    DEFAULT_TIMEOUT_S,
    Effect,
    Identity,
    Reconcile,
    Tool,
    ToolContext,
)

__all__ = ["ToolFunction", "function_of", "tool"]

ToolFunction = Callable[..., Awaitable[dict[str, Any]]]
"""What `tool` decorates: ``async def f(ctx: ToolContext, <fields>, [operation_id: str])``."""

OPERATION_ID = "operation_id"

_PARAMETER_SECTIONS = frozenset({"args", "arguments", "parameters", "params"})
_DROPPED_SECTIONS = _PARAMETER_SECTIONS | {"returns", "return", "yields", "yield", "raises"}
"""Sections the model is not shown in the tool description."""
_GOOGLE_HEADER = re.compile(r"^(?P<section>[A-Za-z]+):")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_UNINDENTED = re.compile(r"^\S")
_REST_FIELD = re.compile(r"^:\w+(?:\s[^:]*)?:")
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)(?:\s*:.*)?(?P<text>)$")
_REST_ENTRY = re.compile(
    r"^:(?:param|parameter|arg|argument)\s+(?:[^:]*\s)?\*{0,2}(?P<name>\w+)\s*:\s*(?P<text>.*)$"
)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def tool(
    *,
    effect: Effect,
    name: str | None = None,
    version: str = "1",
    description: str | None = None,
    reconcile: Reconcile[Any] | None = None,
    resource_key: Callable[[Any], str | None] | None = None,
    authorize: Callable[[Identity, Any], str | None] | None = None,
    preconditions: Callable[[ToolContext, Any], Awaitable[str | None]] | None = None,
    approval: Callable[[Identity, Any], str | None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    sensitive_fields: Iterable[str] = (),
) -> Callable[[ToolFunction], Tool[Any]]:
    """Declare a tool from an ``async def``; ``effect`` has no default because every tool
    must say what it does to the world.  A hook left as None keeps the contract's default.

    Raises `TypeError` for a signature that cannot become an argument model and `ValueError`
    for a declaration the `Tool` constructor refuses (no description, a write without
    ``reconcile``, a bad name...), both at decoration time.
    """
    if not isinstance(effect, Effect):
        raise TypeError(f"tool effect must be an Effect, not {effect!r}")
    hooks = {
        "reconcile": reconcile,
        "resource_key": resource_key,
        "authorize": authorize,
        "preconditions": preconditions,
        "approval": approval,
    }
    settings: dict[str, Any] = {key: hook for key, hook in hooks.items() if hook is not None}
    settings |= {"version": version, "effect": effect, "timeout_s": timeout_s}
    settings["sensitive_fields"] = frozenset(sensitive_fields)

    def decorate(function: ToolFunction) -> Tool[Any]:
        return _build(function, name, description, settings)

    return decorate


def _build(
    function: ToolFunction, name: str | None, description: str | None, settings: dict[str, Any]
) -> Tool[Any]:
    """The `Tool` for ``function``; ``settings`` are the `Tool` fields given to `tool`."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"tool function {_label(function)} must be defined with `async def`")
    summary, parameter_docs = _parse_docstring(function.__doc__ or "")
    tool_name = function.__name__ if name is None else name
    args_model, takes_operation_id = _args_model(function, tool_name, parameter_docs)
    text = summary if description is None else description
    if not text.strip():
        raise ValueError(f"tool function {_label(function)} needs a docstring or description=")
    execute = _CallFunction(function, tuple(args_model.model_fields), takes_operation_id)
    return Tool(
        name=tool_name, description=text, args_model=args_model, execute=execute, **settings
    )


def function_of(decorated: Tool[Any]) -> ToolFunction:
    """The ``async def`` a `tool`-built tool calls, to unit-test the function's own code."""
    if not isinstance(decorated.execute, _CallFunction):
        raise TypeError(f"tool {decorated.name!r} was not built by @tool")
    return decorated.execute.function


@dataclass(frozen=True, slots=True)
class _CallFunction:
    """`Tool.execute` of a decorated function: the validated field values (models stay
    models, nothing is re-serialised) as keyword arguments."""

    function: ToolFunction
    field_names: tuple[str, ...]
    takes_operation_id: bool

    async def __call__(
        self, ctx: ToolContext, args: BaseModel, operation_id: str
    ) -> dict[str, Any]:
        values = {field_name: getattr(args, field_name) for field_name in self.field_names}
        if self.takes_operation_id:
            values[OPERATION_ID] = operation_id
        return await self.function(ctx, **values)


def _args_model(
    function: ToolFunction, tool_name: str, parameter_docs: dict[str, str]
) -> tuple[type[BaseModel], bool]:
    """The strict model of ``function``'s fields, and whether it takes the operation id."""
    label = _label(function)
    parameters = list(inspect.signature(function).parameters.values())
    hints = _type_hints(function)
    first = parameters[0] if parameters else None
    if first is None or first.kind not in _POSITIONAL or hints.get(first.name) is not ToolContext:
        raise TypeError(f"tool function {label}: the first parameter must be `ctx: ToolContext`")
    fields: dict[str, Any] = {}
    takes_operation_id = False
    for parameter in parameters[1:]:
        _check_parameter(label, parameter, hints)
        if parameter.name == OPERATION_ID:
            takes_operation_id = True
        else:
            fields[parameter.name] = _field(hints[parameter.name], parameter, parameter_docs)
    try:
        model = create_model(
            _model_name(tool_name),
            __config__=ConfigDict(extra="forbid"),
            __module__=function.__module__,
            **fields,
        )
    except PydanticUserError as exc:  # e.g. a name such as "_x", a type with no schema
        raise TypeError(f"tool function {label}: {exc}") from exc
    return model, takes_operation_id


def _check_parameter(label: str, parameter: inspect.Parameter, hints: dict[str, Any]) -> None:
    """Refuse what a JSON object of named arguments cannot fill."""
    where = f"tool function {label}: parameter {parameter.name!r}"
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        raise TypeError(f"{where}: *args cannot be a tool argument")
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{where}: **kwargs cannot be a tool argument")
    if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise TypeError(f"{where} is positional-only; tool arguments are passed by name")
    if parameter.name not in hints:
        raise TypeError(f"{where} has no type annotation")
    if parameter.name == OPERATION_ID and hints[parameter.name] is not str:
        raise TypeError(f"{where} must be annotated `str` (it receives the idempotency key)")
    if isinstance(parameter.default, FieldInfo):  # the default must stay callable-with
        raise TypeError(f"{where}: put Field(...) in Annotated[..., Field(...)], not the default")


def _field(
    annotation: Any, parameter: inspect.Parameter, parameter_docs: dict[str, str]
) -> tuple[Any, Any]:
    """``(annotation, Field(...))`` for `create_model`; a ``Field(description=...)`` in the
    annotation wins over the docstring."""
    empty = parameter.default is inspect.Parameter.empty
    default = PydanticUndefined if empty else parameter.default
    doc = parameter_docs.get(parameter.name)
    if doc is None or _annotated_description(annotation):
        return annotation, Field(default)
    return annotation, Field(default, description=doc)


def _annotated_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not Annotated:
        return False
    extras = typing.get_args(annotation)[1:]
    return any(isinstance(extra, FieldInfo) and extra.description for extra in extras)


def _type_hints(function: ToolFunction) -> dict[str, Any]:
    """Resolved annotations: under ``from __future__ import annotations`` they are strings."""
    try:
        return typing.get_type_hints(function, include_extras=True)
    except NameError as exc:
        hint = "types in annotations must be importable from the function's module"
        raise TypeError(f"tool function {_label(function)}: {exc}; {hint}") from exc


def _model_name(tool_name: str) -> str:
    """``get_weather`` → ``GetWeatherArgs``, the name pydantic's errors and reprs show."""
    parts = re.split(r"[_\-]+", tool_name)
    return "".join(part[:1].upper() + part[1:] for part in parts) + "Args"


def _label(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def _parse_docstring(docstring: str) -> tuple[str, dict[str, str]]:
    """The description without its parameters/returns/raises sections, and each documented
    parameter's text (continuation lines joined with spaces)."""
    lines = inspect.cleandoc(docstring).splitlines()
    kept: list[str] = []
    parameter_docs: dict[str, str] = {}
    index = 0
    while index < len(lines):
        end, entries = _section_at(lines, index)
        if end == index:
            kept.append(lines[index])
            end += 1
        parameter_docs.update(entries)
        index = end
    return inspect.cleandoc("\n".join(kept)).strip(), parameter_docs


def _section_at(lines: list[str], start: int) -> tuple[int, dict[str, str]]:
    """Where a dropped section starting at ``start`` ends and the parameters it documents;
    ``(start, {})`` when none starts there."""
    google = _GOOGLE_HEADER.match(lines[start])
    numpy_header = _is_numpy_header(lines, start)
    if google and google["section"].lower() in _DROPPED_SECTIONS:
        section, end = google["section"], _indented_end(lines, start + 1)
        block, entry = textwrap.dedent("\n".join(lines[start + 1 : end])), _GOOGLE_ENTRY
    elif numpy_header and lines[start].strip().lower() in _DROPPED_SECTIONS:
        section, end = lines[start].strip(), start + 2
        while end < len(lines) and not _is_numpy_header(lines, end):
            end += 1
        block, entry = "\n".join(lines[start + 2 : end]), _NUMPY_ENTRY
    elif _REST_FIELD.match(lines[start]):
        end = _indented_end(lines, start + 1)
        return end, _entries("\n".join(lines[start:end]), _REST_ENTRY)
    else:
        return start, {}
    return end, _entries(block, entry) if section.lower() in _PARAMETER_SECTIONS else {}


def _is_numpy_header(lines: list[str], index: int) -> bool:
    """A title over a rule of dashes, as numpy's ``Parameters`` / ``----------``."""
    next_line = lines[index + 1] if index + 1 < len(lines) else ""
    return bool(_UNINDENTED.match(lines[index]) and _NUMPY_RULE.match(next_line))


def _indented_end(lines: list[str], start: int) -> int:
    """The first line from ``start`` that is neither blank nor indented."""
    for index in range(start, len(lines)):
        if _UNINDENTED.match(lines[index]):
            return index
    return len(lines)


def _entries(block: str, entry: re.Pattern[str]) -> dict[str, str]:
    """Entries that start unindented and continue on indented lines."""
    texts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in block.splitlines():
        head = entry.match(line) if _UNINDENTED.match(line) else None
        if head:
            current = texts.setdefault(head["name"], [])
            current.append(head["text"].strip())
        elif current is not None and line.strip():
            current.append(line.strip())
    return {key: " ".join(part for part in parts if part) for key, parts in texts.items()}
