"""The OpenAPI document at ``/openapi.json``: FastAPI's, plus the run spec's own JSON schema.

``POST /runs`` takes its body as plain JSON so that `callgate.runspec.parse_spec` — the one
validator every submit path uses — says what is wrong in its own words; the document still
shows callers the exact schema, from the same pydantic model, under ``components.schemas``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from callgate.runspec import RunSpec

SPEC_REF = {"$ref": "#/components/schemas/RunSpec"}


def install(app: FastAPI) -> None:
    """Serve ``app``'s document with the run spec's schema in it (built once, then kept)."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema = RunSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            components.update(schema.pop("$defs", {}))
            components["RunSpec"] = schema
            body = doc["paths"]["/runs"]["post"]["requestBody"]
            body["content"]["application/json"]["schema"] = SPEC_REF
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
