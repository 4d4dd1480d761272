"""The tool contract: declarations checked at definition, provider-safe schemas, the registry."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from callgate.standins.demo import travel
from callgate.tools.contract import REDACTED, Effect, Reconciliation, Tool, ToolContext
from callgate.tools.registry import ToolRegistry, load_registry


class Address(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(description="A property that happens to be called title.")
    city: str


class Booking(BaseModel):
    model_config = ConfigDict(extra="forbid")
    guest: str
    address: Address
    previous: list[Address] = Field(default_factory=list)
    card_number: str = ""


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    children: list[Node] = Field(default_factory=list)


class Lax(BaseModel):
    x: int


async def _execute(ctx: ToolContext, args: Any, operation_id: str) -> dict[str, Any]:
    return {}


async def _reconcile(ctx: ToolContext, args: Any, operation_id: str) -> Reconciliation:
    return Reconciliation("unknown")


def _tool(**overrides: Any) -> Tool[Any]:
    fields: dict[str, Any] = dict(
        name="book", version="1", description="Book a room.", args_model=Booking,
        effect=Effect.WRITE, execute=_execute, reconcile=_reconcile,
    )  # fmt: skip
    fields.update(overrides)
    return Tool(**fields)


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in _walk(v))]
    if isinstance(node, list):
        return [d for v in node for d in _walk(v)]
    return []


def test_schema_is_self_contained_object() -> None:
    schema = _tool().json_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    nodes = _walk(schema)
    assert not any("$ref" in n or "$defs" in n for n in nodes)
    address = schema["properties"]["address"]
    assert address["additionalProperties"] is False
    assert set(address["properties"]) == {"title", "city"}  # a *property* named title stays
    assert "title" not in schema and "title" not in address  # generated titles go
    assert schema["properties"]["previous"]["items"]["properties"]["city"] == {"type": "string"}
    assert schema["required"] == ["guest", "address"]


def test_json_schema_returns_a_copy() -> None:
    tool = _tool()
    tool.json_schema()["properties"].clear()
    assert "guest" in tool.json_schema()["properties"]


def test_travel_schema_carries_pattern_and_date_format() -> None:
    props = travel.get_train_status.json_schema()["properties"]
    assert props["train_number"]["pattern"] == travel.TRAIN_NUMBER_PATTERN
    assert props["date"]["format"] == "date"
    assert props["date"]["description"] == "Travel date, YYYY-MM-DD."


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"args_model": Node}, "cannot inline"),
        ({"args_model": Lax}, "extra='forbid'"),
        ({"reconcile": None}, "must define reconcile"),
        ({"name": "has space"}, "must match"),
        ({"description": "  "}, "required"),
        ({"timeout_s": 0}, "positive"),
    ],
)
def test_bad_declarations_fail_at_definition(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        _tool(**overrides)


def test_resource_of_orders_writes_only() -> None:
    args = Booking.model_validate({"guest": "g", "address": {"title": "Dr", "city": "X"}})
    assert _tool().resource_of(args) == "tool:book"
    assert _tool(resource_key=lambda a: f"guest:{a.guest}").resource_of(args) == "guest:g"
    assert _tool(effect=Effect.READ, resource_key=lambda a: "x").resource_of(args) is None


def test_redact_hides_sensitive_fields_at_any_depth() -> None:
    tool = _tool(sensitive_fields=frozenset({"card_number", "city"}))
    data = {"guest": "g", "card_number": "4111", "address": {"title": "Dr", "city": "X"}}
    assert tool.redact(data) == {
        "guest": "g", "card_number": REDACTED, "address": {"title": "Dr", "city": REDACTED},
    }  # fmt: skip
    assert data["card_number"] == "4111"  # the original is untouched


def test_validate_is_strict_json_mode() -> None:
    tool = travel.get_train_status
    args = tool.validate({"train_number": "G1234", "date": "2026-12-20"})
    assert tool.dump(args) == {"train_number": "G1234", "date": "2026-12-20"}
    with pytest.raises(ValueError, match="valid string"):
        tool.validate({"train_number": 1234, "date": "2026-12-20"})
    with pytest.raises(ValueError, match="pattern"):
        tool.validate({"train_number": "G1234", "date": "1767225600"})  # not a timestamp


def test_load_registry_and_specs() -> None:
    registry = load_registry(["callgate.standins.demo.travel"])
    assert registry.names() == ("get_train_status", "get_weather")
    specs = registry.specs(["get_weather", "get_train_status", "get_weather"])
    assert [s.name for s in specs] == ["get_weather", "get_train_status"]
    assert specs[0].parameters == travel.get_weather.json_schema()
    assert registry.get("nope") is None and "get_weather" in registry
    assert registry.unknown(["get_weather", "nope"]) == ["nope"]
    with pytest.raises(ValueError, match="nope"):
        registry.specs(["nope"])


def test_duplicate_names_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"duplicate tool name 'get_train_status'.*standins"):
        load_registry(["callgate.standins.demo.travel", "callgate.standins.demo.travel"])
    with pytest.raises(ValueError, match="duplicate"):
        ToolRegistry([_tool(), _tool()])


def test_module_without_tools_list_is_rejected() -> None:
    with pytest.raises(ValueError, match="no TOOLS list"):
        load_registry(["callgate.tools.canonical"])


async def test_context_setting_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiohttp

    from callgate.tools.contract import Identity

    async with aiohttp.ClientSession() as session:

        def ctx(config: dict[str, str]) -> ToolContext:
            return ToolContext(
                run_id="r", call_id="c", turn=1, identity=Identity(user="alice"),
                session=session, config=config,
            )  # fmt: skip

        monkeypatch.delenv("CALLGATE_X_URL", raising=False)
        assert ctx({}).setting("CALLGATE_X_URL", "http://default") == "http://default"
        monkeypatch.setenv("CALLGATE_X_URL", "http://env")
        assert ctx({}).setting("CALLGATE_X_URL", "http://default") == "http://env"
        assert ctx({"CALLGATE_X_URL": "http://cfg"}).setting("CALLGATE_X_URL", "d") == "http://cfg"
