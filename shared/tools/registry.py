"""The deployment's registry: every tool and acceptance validator a worker may run, by name.

Authority comes from the deployment (README: Security): the modules listed in
``CALLGATE_TOOL_MODULES`` (``callgate up --tools m1,m2``) are imported once, when a worker
starts, and their ``TOOLS`` list (and optional ``ACCEPTANCE`` mapping of name → validator) is
all a run can ever use.  A run spec or a stream message only *selects* among these by name;
nothing they say is ever imported.  The deployment's MCP servers (``CALLGATE_MCP_SERVERS``) feed
the same tools by name: `with_tools` adds theirs when the worker has connected at start.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from callgate.tools.contract import Tool, ToolSpec

AcceptanceValidator = Callable[[str], str | None]
"""``(final answer) -> None`` if acceptable, else the reason told to the model."""


class RegistryError(ValueError):
    """A deployment's tool modules do not load: the worker refuses to start, saying why."""


class ToolRegistry:
    """The tools and acceptance validators a process knows, by name; read-only once built."""

    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._sources: dict[str, str] = {}
        self.validators: dict[str, AcceptanceValidator] = {}
        """Acceptance validators by name (a run's ``{"validator": NAME}``)."""
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool[Any], *, source: str = "<direct>") -> None:
        """Register a tool; a second tool with the same name is a configuration error."""
        if not isinstance(tool, Tool):
            raise RegistryError(f"{source}: {tool!r} is not a Tool")
        if tool.name in self._tools:
            raise RegistryError(
                f"duplicate tool name {tool.name!r}: defined in {self._sources[tool.name]}"
                f" and in {source}"
            )
        self._tools[tool.name] = tool
        self._sources[tool.name] = source

    def with_tools(self, tools: Iterable[tuple[Tool[Any], str]]) -> ToolRegistry:
        """A new registry of these tools and validators plus ``tools`` (each with its source);
        this one, perhaps shared by the process, is left as it was."""
        extended = ToolRegistry()
        for tool in self:
            extended.add(tool, source=self._sources[tool.name])
        extended.validators = dict(self.validators)
        for tool, source in tools:
            extended.add(tool, source=source)
        return extended

    def add_validator(self, name: str, validator: AcceptanceValidator, *, source: str) -> None:
        if not callable(validator) or name in self.validators:
            raise RegistryError(
                f"{source}: acceptance validator {name!r} is not callable or is registered twice"
            )
        self.validators[name] = validator

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def unknown(self, names: Iterable[str]) -> list[str]:
        """Names not registered here: a run's allow-list is checked when it is created."""
        return [n for n in names if n not in self._tools]

    def specs(self, allowed: Iterable[str] | None = None) -> list[ToolSpec]:
        """Specs for ``allowed`` (deduplicated, in its order), or all tools when None."""
        names = list(dict.fromkeys(self._tools if allowed is None else allowed))
        missing = self.unknown(names)
        if missing:
            raise RegistryError(f"allow-list names unregistered tools: {', '.join(missing)}")
        return [self._tools[n].spec() for n in names]

    def describe(self) -> str:
        """``name (module), …`` for error messages and banners."""
        return ", ".join(f"{n} ({self._sources[n]})" for n in self._tools) or "none"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def load_registry(modules: Sequence[str]) -> ToolRegistry:
    """The registry of the deployment's tool modules, imported once per process.

    Called with ``settings.tool_modules`` only — never with a name a run or message gave.
    """
    return _registry(tuple(modules))


@functools.lru_cache(maxsize=8)
def _registry(modules: tuple[str, ...]) -> ToolRegistry:
    registry = ToolRegistry()
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RegistryError(f"tool module {module_name!r} does not import: {exc}") from exc
        tools = getattr(module, "TOOLS", None)
        if not isinstance(tools, list | tuple):
            raise RegistryError(f"tool module {module_name} has no TOOLS list")
        for tool in tools:
            registry.add(tool, source=module_name)
        validators: Mapping[str, AcceptanceValidator] = getattr(module, "ACCEPTANCE", {})
        for name, validator in validators.items():
            registry.add_validator(name, validator, source=module_name)
    return registry
