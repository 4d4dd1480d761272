"""The HTTP API's OpenAPI document: every route, its methods, the bearer scheme on every route
that needs a token, and problem bodies for the refusals — built from the app itself, so a route
added without its documentation shows here."""

from __future__ import annotations

from typing import Any

from callgate.api import create_app
from callgate.config import Settings

ROUTES = {
    "/runs": {"get", "post"},
    "/runs/{run_id}": {"get"},
    "/runs/{run_id}/events": {"get"},
    "/runs/{run_id}/cancel": {"post"},
    "/runs/{run_id}/resume": {"post"},
    "/runs/{run_id}/reply": {"post"},
    "/runs/{run_id}/calls/{call_id}/resolve": {"post"},
    "/approvals/{approval_id}/{decision}": {"post"},
    "/inbox": {"get"},
    "/healthz": {"get"},
}


def document() -> dict[str, Any]:
    return create_app(Settings(redis_url="redis://127.0.0.1:1/0")).openapi()


def test_every_route_is_documented_with_its_methods() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.")
    assert {path: set(ops) for path, ops in doc["paths"].items()} == ROUTES
    decision = doc["paths"]["/approvals/{approval_id}/{decision}"]["post"]["parameters"]
    [kind] = [p for p in decision if p["name"] == "decision"]
    assert kind["schema"]["enum"] == ["approve", "deny"]


def test_every_route_but_health_needs_a_bearer_and_documents_its_refusals() -> None:
    doc = document()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path == "/healthz":
                assert "security" not in op
                continue
            assert op["security"] == [{"HTTPBearer": []}], (method, path)
            refusal = op["responses"]["401"]["content"]
            assert "application/problem+json" in refusal, (method, path)


def test_the_events_route_offers_server_sent_events() -> None:
    ok = document()["paths"]["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in ok


def test_the_run_spec_schema_is_the_run_spec_models() -> None:
    doc = document()
    body = doc["paths"]["/runs"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/RunSpec"}
    spec = doc["components"]["schemas"]["RunSpec"]
    assert {"api", "model", "input"} <= set(spec["required"])
    assert spec["additionalProperties"] is False
    missing = {
        ref
        for ref in refs(doc)
        if ref.removeprefix("#/components/schemas/") not in doc["components"]["schemas"]
    }
    assert missing == set(), "every $ref resolves"


def refs(node: Any) -> list[str]:
    """Every ``$ref`` value anywhere in ``node``."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs(value)]
    return []
