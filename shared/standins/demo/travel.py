"""Demo read tools over the demo travel service: ``get_train_status`` and ``get_weather``.

Register with ``load_registry(["callgate.standins.demo.travel"])``.  The service URL comes from
``CALLGATE_TRAVEL_URL`` (tool context config, then environment; default
``http://127.0.0.1:8765``).

Scope (authorization lives here, not in the descriptions): ``alice`` may query only train
G1234 on 2026-12-20, ``bob`` only D567 on 2026-12-20, a ``travel_admin`` any train; anyone
may ask for the weather.

``get_train_status`` is declared with the `Tool` constructor, ``get_weather`` with the `tool`
decorator (its arguments and description come from the function's signature and docstring).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from callgate.errors import ToolError
from callgate.standins.demo.http import tool_headers
from callgate.tools.contract import Effect, Identity, IsoDate, Tool, ToolContext
from callgate.tools.decorator import tool

TRAVEL_URL_SETTING = "CALLGATE_TRAVEL_URL"
DEFAULT_TRAVEL_URL = "http://127.0.0.1:8765"
TRAIN_NUMBER_PATTERN = r"^[GDCZTK][0-9]{1,4}$"
ADMIN_ROLE = "travel_admin"
TRAIN_SCOPES: dict[str, frozenset[tuple[str, str]]] = {
    "alice": frozenset({("G1234", "2026-12-20")}),
    "bob": frozenset({("D567", "2026-12-20")}),
}
"""Which (train, date) pairs each user may query."""


class TrainStatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train_number: str = Field(
        pattern=TRAIN_NUMBER_PATTERN, description="Train number, e.g. G1234 or D567."
    )
    date: IsoDate = Field(description="Travel date, YYYY-MM-DD.")


async def _get_json(
    ctx: ToolContext, path: str, params: dict[str, str], operation_id: str, missing: str
) -> dict[str, Any]:
    """One GET to the travel service.  404 is a definitive `ToolError` the model sees;
    5xx and transport errors raise `aiohttp` errors so the executor can redo the read."""
    base = ctx.setting(TRAVEL_URL_SETTING, DEFAULT_TRAVEL_URL).rstrip("/")
    headers = tool_headers(ctx, operation_id)
    async with ctx.session.get(f"{base}{path}", params=params, headers=headers) as resp:
        if resp.status == 404:
            raise ToolError(missing, code="not_found")
        resp.raise_for_status()
        body = await resp.json()
    if not isinstance(body, dict):
        raise ToolError("travel service sent an unexpected answer", code="bad_upstream")
    return body


async def _train_status(
    ctx: ToolContext, args: TrainStatusArgs, operation_id: str
) -> dict[str, Any]:
    params = {"train_number": args.train_number, "date": args.date}
    return await _get_json(ctx, "/train_status", params, operation_id, "no such train")


def _authorize_train(identity: Identity, args: TrainStatusArgs) -> str | None:
    if ADMIN_ROLE in identity.roles:
        return None
    if (args.train_number, args.date) in TRAIN_SCOPES.get(identity.user, frozenset()):
        return None
    return f"user {identity.user!r} may not query train {args.train_number} on {args.date}"


get_train_status = Tool(
    name="get_train_status",
    version="1",
    description="Current status (on time or delayed, with minutes) of one train on a date.",
    args_model=TrainStatusArgs,
    effect=Effect.READ,
    execute=_train_status,
    authorize=_authorize_train,
    timeout_s=2.0,
)


@tool(effect=Effect.READ, timeout_s=3.0)
async def get_weather(
    ctx: ToolContext,
    city: Annotated[str, Field(min_length=1, max_length=64)],
    date: IsoDate,
    operation_id: str,
) -> dict[str, Any]:
    """Weather forecast (condition, low and high in °C) for a city on a date.

    Args:
        city: City name, e.g. Hangzhou.
        date: Date of the forecast, YYYY-MM-DD.
    """
    params = {"city": city, "date": date}
    return await _get_json(ctx, "/weather", params, operation_id, "no weather data for that city")


TOOLS: list[Tool[Any]] = [get_train_status, get_weather]
