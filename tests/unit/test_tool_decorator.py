"""`@tool`: a typed ``async def`` becomes the same `Tool` a hand-written declaration gives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import aiohttp
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from callgate.standins.demo import travel
from callgate.tools.contract import (
    DEFAULT_TIMEOUT_S,
    Effect,
    Identity,
    IsoDate,
    Reconciliation,
    Tool,
    ToolContext,
)
from callgate.tools.decorator import function_of, tool
from callgate.tools.registry import ToolRegistry

CALLS: list[dict[str, Any]] = []
"""What the decorated test functions were called with, in order."""


class Seat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    row: int
    letter: str


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


@pytest.fixture
async def ctx() -> AsyncIterator[ToolContext]:
    async with aiohttp.ClientSession() as session:  # never used for a request here
        yield ToolContext(
            run_id="r1", call_id="c1", turn=1, identity=Identity(user="alice"), session=session
        )


@tool(effect=Effect.READ)
async def get_weather(ctx: ToolContext, city: str, date: IsoDate | None = None) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name, e.g. Hangzhou.
        date: Day to forecast (YYYY-MM-DD); today when omitted.
    """
    CALLS.append({"city": city, "date": date})
    return {"city": city, "condition": "sunny"}


class HandWrittenWeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(description="City name, e.g. Hangzhou.")
    date: IsoDate | None = Field(
        None, description="Day to forecast (YYYY-MM-DD); today when omitted."
    )


async def _hand_written_weather(ctx: ToolContext, args: Any, operation_id: str) -> dict[str, Any]:
    return {}


def test_schema_and_spec_equal_the_hand_written_declaration() -> None:
    by_hand = Tool(
        name="get_weather", version="1", description="Current weather for a city.",
        args_model=HandWrittenWeatherArgs, effect=Effect.READ, execute=_hand_written_weather,
    )  # fmt: skip
    assert get_weather.json_schema() == by_hand.json_schema()
    assert get_weather.spec() == by_hand.spec()
    assert (get_weather.name, get_weather.version) == ("get_weather", "1")
    assert get_weather.args_model.__name__ == "GetWeatherArgs"
    assert get_weather.timeout_s == DEFAULT_TIMEOUT_S and get_weather.effect is Effect.READ


def test_validate_rejects_extra_fields_and_applies_defaults() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        get_weather.validate({"city": "Hangzhou", "units": "F"})
    with pytest.raises(ValidationError, match="city"):
        get_weather.validate({"date": "2026-12-20"})
    args = get_weather.validate({"city": "Hangzhou"})
    assert isinstance(args, get_weather.args_model)
    assert Tool.dump(args) == {"city": "Hangzhou", "date": None}


def test_iso_date_keeps_its_format_and_check() -> None:
    date_schema = get_weather.json_schema()["properties"]["date"]["anyOf"][0]
    assert date_schema["format"] == "date"
    assert get_weather.validate({"city": "X", "date": "2026-12-20"}).date == "2026-12-20"
    for bad in ("2026-02-30", "20261220", "tomorrow"):
        with pytest.raises(ValidationError):
            get_weather.validate({"city": "X", "date": bad})


async def test_execute_calls_the_function_with_the_validated_values(ctx: ToolContext) -> None:
    args = get_weather.validate({"city": "Hangzhou", "date": "2026-12-20"})
    result = await get_weather.execute(ctx, args, "op-1")
    assert result == {"city": "Hangzhou", "condition": "sunny"}
    assert CALLS == [{"city": "Hangzhou", "date": "2026-12-20"}]


@tool(effect=Effect.IDEMPOTENT_WRITE, sensitive_fields=["card"])
async def book_seat(
    ctx: ToolContext, seat: Seat, card: str, operation_id: str, note: str = ""
) -> dict[str, Any]:
    """Book one seat."""
    CALLS.append({"seat": seat, "card": card, "operation_id": operation_id, "note": note})
    return {"booked": True}


async def test_operation_id_is_passed_through_and_hidden(ctx: ToolContext) -> None:
    schema = book_seat.json_schema()
    assert set(schema["properties"]) == {"seat", "card", "note"}
    assert schema["required"] == ["seat", "card"]
    with pytest.raises(ValidationError):
        book_seat.validate({"seat": {"row": 1, "letter": "A"}, "card": "4111", "operation_id": "x"})
    args = book_seat.validate({"seat": {"row": 3, "letter": "C"}, "card": "4111"})
    assert await book_seat.execute(ctx, args, "op-7") == {"booked": True}
    (call,) = CALLS
    assert call["seat"] is args.seat and isinstance(call["seat"], Seat)  # not re-serialised
    assert (call["card"], call["operation_id"], call["note"]) == ("4111", "op-7", "")
    assert book_seat.sensitive_fields == frozenset({"card"})
    assert book_seat.redact({"card": "4111"}) == {"card": "[redacted]"}


def test_annotated_field_is_honoured_and_its_description_wins() -> None:
    @tool(effect=Effect.READ)
    async def lookup(
        ctx: ToolContext,
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="From Field.")],
        limit: Annotated[int, Field(ge=1, le=10)] = 5,
    ) -> dict[str, Any]:
        """Look a code up.

        Args:
            code: From the docstring.
            limit: How many results.
        """
        return {}

    props = lookup.json_schema()["properties"]
    code = {"description": "From Field.", "pattern": "^[A-Z]{3}$", "type": "string"}
    assert props["code"] == code
    assert props["limit"] == {
        "default": 5, "description": "How many results.", "maximum": 10, "minimum": 1,
        "type": "integer",
    }  # fmt: skip
    with pytest.raises(ValidationError):
        lookup.validate({"code": "HGH", "limit": 11})


async def _reconcile_refund(ctx: ToolContext, args: Any, operation_id: str) -> Reconciliation:
    CALLS.append({"hook": "reconcile", "args": args, "operation_id": operation_id})
    return Reconciliation("applied", {"refunded": args.amount})


async def _refund_preconditions(ctx: ToolContext, args: Any) -> str | None:
    CALLS.append({"hook": "preconditions", "args": args})
    return "account closed" if args.account == "acct-0" else None


def _authorize_refund(identity: Identity, args: Any) -> str | None:
    return None if identity.user == "alice" else f"{identity.user} may not refund {args.account}"


@tool(
    effect=Effect.WRITE,
    name="refund",
    version="3",
    description="Refund an amount to an account.",
    reconcile=_reconcile_refund,
    resource_key=lambda args: f"account:{args.account}",
    authorize=_authorize_refund,
    preconditions=_refund_preconditions,
    approval=lambda identity, args: "finance" if args.amount > 100 else None,
    timeout_s=5.0,
)
async def refund_money(ctx: ToolContext, account: str, amount: int) -> dict[str, Any]:
    return {"refunded": amount}


async def test_hooks_receive_the_generated_model(ctx: ToolContext) -> None:
    assert (refund_money.name, refund_money.version, refund_money.timeout_s) == ("refund", "3", 5.0)
    assert refund_money.description == "Refund an amount to an account."
    big = refund_money.validate({"account": "acct-1", "amount": 500})
    assert isinstance(big, refund_money.args_model)
    assert refund_money.resource_of(big) == "account:acct-1"
    assert refund_money.authorize(Identity(user="alice"), big) is None
    assert refund_money.authorize(Identity(user="bob"), big) == "bob may not refund acct-1"
    assert refund_money.approval(Identity(user="alice"), big) == "finance"
    assert await refund_money.preconditions(ctx, big) is None
    closed = refund_money.validate({"account": "acct-0", "amount": 5})
    assert await refund_money.preconditions(ctx, closed) == "account closed"
    assert refund_money.reconcile is not None
    found = await refund_money.reconcile(ctx, big, "op-9")
    assert found == Reconciliation("applied", {"refunded": 500})
    assert CALLS[-1] == {"hook": "reconcile", "args": big, "operation_id": "op-9"}


def test_defaults_of_hooks_are_the_contracts() -> None:
    args = get_weather.validate({"city": "Hangzhou"})
    assert get_weather.authorize(Identity(user="anyone"), args) is None
    assert get_weather.approval(Identity(user="anyone"), args) is None
    assert get_weather.resource_of(args) is None and get_weather.reconcile is None


async def test_function_of_returns_the_plain_function(ctx: ToolContext) -> None:
    function = function_of(get_weather)
    assert function.__name__ == "get_weather"
    assert await function(ctx, city="Paris") == {"city": "Paris", "condition": "sunny"}
    assert CALLS == [{"city": "Paris", "date": None}]
    with pytest.raises(TypeError, match="not built by @tool"):
        function_of(travel.get_train_status)


def test_decorated_tools_register_like_any_tool() -> None:
    registry = ToolRegistry([get_weather, book_seat, refund_money])
    assert registry.names() == ("get_weather", "book_seat", "refund")
    assert registry.specs(["refund"])[0].parameters == refund_money.json_schema()


@tool(effect=Effect.READ)
async def numpy_style(ctx: ToolContext, city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for several days.

    Parameters
    ----------
    city : str
        City name,
        as the traveller spells it.
    days : int
        Number of days.

    Returns
    -------
    dict
        The forecast.
    """
    return {}


@tool(effect=Effect.READ)
async def rest_style(ctx: ToolContext, city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for several days.

    :param city: City name,
        as the traveller spells it.
    :param int days: Number of days.
    :returns: The forecast.
    :raises ToolError: for an unknown city.
    """
    return {}


@tool(effect=Effect.READ)
async def google_style(ctx: ToolContext, city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for several days.

    Args:
        city (str): City name,
            as the traveller spells it.
        days: Number of days.

    Returns:
        The forecast.

    Raises:
        ToolError: for an unknown city.

    Ask for at most a week.
    """
    return {}


@pytest.mark.parametrize("declared", [numpy_style, rest_style, google_style])
def test_docstring_styles(declared: Tool[Any]) -> None:
    props = declared.json_schema()["properties"]
    assert props["city"]["description"] == "City name, as the traveller spells it."
    assert props["days"]["description"] == "Number of days."
    expected = "Forecast for several days."
    if declared is google_style:
        expected += "\n\nAsk for at most a week."
    assert declared.description == expected


def test_description_argument_overrides_the_docstring() -> None:
    @tool(effect=Effect.READ, description="Given here.")
    async def documented(ctx: ToolContext, city: str) -> dict[str, Any]:
        """From the docstring.

        Args:
            city: The city.
        """
        return {}

    assert documented.description == "Given here."
    assert documented.json_schema()["properties"]["city"]["description"] == "The city."


def test_demo_get_weather_matches_its_hand_written_declaration() -> None:
    class WeatherArgs(BaseModel):  # travel.get_weather's model before it used @tool
        model_config = ConfigDict(extra="forbid")
        city: str = Field(min_length=1, max_length=64, description="City name, e.g. Hangzhou.")
        date: IsoDate = Field(description="Date of the forecast, YYYY-MM-DD.")

    weather = travel.get_weather
    assert weather.json_schema() == Tool(
        name="get_weather", version="1", description=weather.description, args_model=WeatherArgs,
        effect=Effect.READ, execute=_hand_written_weather,
    ).json_schema()  # fmt: skip
    assert (weather.name, weather.version, weather.timeout_s) == ("get_weather", "1", 3.0)
    assert weather.description == (
        "Weather forecast (condition, low and high in °C) for a city on a date."
    )
    assert weather.effect is Effect.READ and weather.reconcile is None
    with pytest.raises(ValidationError):
        weather.validate({"city": "", "date": "2026-12-20"})


async def _plain(ctx: ToolContext, city: str) -> dict[str, Any]:
    """A read."""
    return {}


def _sync(ctx: ToolContext, city: str) -> dict[str, Any]:
    """Not async."""
    return {}


async def _no_ctx(city: str) -> dict[str, Any]:
    """No context."""
    return {}


async def _ctx_untyped(ctx, city: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Context without its annotation."""
    return {}


async def _untyped(ctx: ToolContext, city) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """An argument without an annotation."""
    return {}


async def _var_positional(ctx: ToolContext, *cities: str) -> dict[str, Any]:
    """*args."""
    return {}


async def _var_keyword(ctx: ToolContext, **filters: str) -> dict[str, Any]:
    """**kwargs."""
    return {}


async def _positional_only(ctx: ToolContext, city: str, /) -> dict[str, Any]:
    """Positional-only."""
    return {}


async def _operation_id_not_str(ctx: ToolContext, operation_id: int) -> dict[str, Any]:
    """A mistyped operation id."""
    return {}


async def _field_as_default(ctx: ToolContext, city: str = Field("X")) -> dict[str, Any]:
    """Field() where a default belongs."""
    return {}


async def _private_field(ctx: ToolContext, _city: str) -> dict[str, Any]:
    """A name pydantic cannot take."""
    return {}


async def _unschemable(ctx: ToolContext, session: aiohttp.ClientSession) -> dict[str, Any]:
    """A type pydantic has no schema for."""
    return {}


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_sync, r"_sync must be defined with `async def`"),
        (_no_ctx, r"_no_ctx: the first parameter must be `ctx: ToolContext`"),
        (_ctx_untyped, r"_ctx_untyped: the first parameter must be `ctx: ToolContext`"),
        (_untyped, r"_untyped: parameter 'city' has no type annotation"),
        (_var_positional, r"_var_positional: parameter 'cities': \*args"),
        (_var_keyword, r"_var_keyword: parameter 'filters': \*\*kwargs"),
        (_positional_only, r"_positional_only: parameter 'city' is positional-only"),
        (_operation_id_not_str, r"parameter 'operation_id' must be annotated `str`"),
        (_field_as_default, r"parameter 'city': put Field\(...\) in Annotated"),
        (_private_field, r"_private_field: .*underscore"),
        (_unschemable, r"_unschemable: .*ClientSession"),
    ],
)
def test_signatures_that_cannot_be_tools_fail_at_decoration(function: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tool(effect=Effect.READ)(function)


def test_unresolvable_annotation_is_a_type_error() -> None:
    class Local(BaseModel):
        x: int

    async def uses_local(ctx: ToolContext, value: Local) -> dict[str, Any]:
        """Names a class its module cannot see."""
        return {}

    with pytest.raises(TypeError, match=r"uses_local: name .Local. is not defined; types in"):
        tool(effect=Effect.READ)(uses_local)


def test_effect_is_required_and_must_be_an_effect() -> None:
    with pytest.raises(TypeError, match="effect"):
        tool()(_plain)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="must be an Effect"):
        tool(effect="read")(_plain)  # type: ignore[arg-type]


async def _undocumented(ctx: ToolContext, city: str) -> dict[str, Any]:
    return {}


async def _only_args_documented(ctx: ToolContext, city: str) -> dict[str, Any]:
    """
    Args:
        city: The city.
    """
    return {}


@pytest.mark.parametrize("function", [_undocumented, _only_args_documented])
def test_no_description_fails_at_decoration(function: Any) -> None:
    with pytest.raises(ValueError, match="needs a docstring or description="):
        tool(effect=Effect.READ)(function)
    assert tool(effect=Effect.READ, description="Given.")(function).description == "Given."


def test_contract_checks_run_at_decoration() -> None:
    with pytest.raises(ValueError, match="a write must define reconcile"):
        tool(effect=Effect.WRITE)(_plain)
    with pytest.raises(ValueError, match="must match"):
        tool(effect=Effect.READ, name="no spaces")(_plain)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        tool(effect=Effect.READ, timeout_s=0)(_plain)
    with pytest.raises(ValueError, match="version and description are required"):
        tool(effect=Effect.READ, version="")(_plain)
