"""What the model is told about a turn's calls, and what the event log may show of its words.

Pure: the caller reads the calls; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson

from callgate.providers.base import ToolResultInput
from callgate.records import CallRecord, OkResult, error_result
from callgate.redact import scrub, sensitive_values
from callgate.tools.registry import ToolRegistry


def result_input(call: CallRecord) -> ToolResultInput:
    """One call's result for the model: its payload, or a structured error."""
    result = call.result or error_result("no_result", "")
    if isinstance(result, OkResult):
        return ToolResultInput(call.provider_call_id, _json_text(result.payload), False)
    error = {"error": result.error.model_dump()}
    return ToolResultInput(call.provider_call_id, _json_text(error), True)


def _json_text(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def marks_sensitive(registry: ToolRegistry, tools: Iterable[str]) -> bool:
    """Whether any of these tools marks an argument or result field sensitive."""
    for name in tools:
        tool = registry.get(name)
        if tool is not None and tool.sensitive_fields:
            return True
    return False


def echo_free(
    texts: Mapping[str, str], calls: Iterable[CallRecord], registry: ToolRegistry
) -> dict[str, str]:
    """``texts`` as the event log may show them: the model saw every argument and result, so
    its words may repeat a value a tool marks sensitive, which events never hold."""
    values: set[str] = set()
    for call in calls:
        tool = registry.get(call.tool)
        if tool is not None and tool.sensitive_fields:
            result = None if call.result is None else call.result.model_dump(mode="json")
            values |= sensitive_values([call.arguments, result], tool.sensitive_fields)
    return {name: scrub(text, values) for name, text in texts.items()}
