"""`RunSpec`: what another service sends to start a run, checked strictly before anything exists.

The spec arrives as JSON (the arq ``start_run`` job, `callgate run`, any language), so it is
validated in pydantic's strict mode with unknown fields forbidden: a typo such as
``max_turn`` must fail loudly rather than silently run with the default budget.  A spec that
does not validate raises `RunSpecError` with one line per problem, and no record is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from callgate.auth.tenancy import TENANT_FIELD, is_tenant_name, run_id_prefix
from callgate.envelopes import new_id
from callgate.errors import RunSpecError
from callgate.records import Api, BatchPolicy, RunRecord
from callgate.states import RunState
from callgate.tools.acceptance import AcceptanceRule
from callgate.tools.canonical import args_hash

_RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class RunSpec(BaseModel):
    """One run request: the task, who it acts for, what it may use, and its budget."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    run_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=_RUN_ID)
    """Callers normally leave it out and the client mints one; it is also the arq job id."""
    api: Api
    """The provider wire protocol: openai-responses, openai-chat or anthropic-messages."""
    model: str = Field(min_length=1, max_length=256)
    input: str = Field(min_length=1, max_length=200_000)
    """The user's task, the first user message."""
    instructions: str | None = Field(default=None, max_length=100_000)
    """System / developer instructions."""
    identity: dict[str, Any] | None = None
    """Who the run acts for (``user``, ``roles``): asserted by the submitting service that signs
    the job, within the roles the deployment lets it grant; None when an identity token
    vouches instead.  Authorization input, never taken from the model."""
    allowed_tools: list[str] | None = Field(default=None, max_length=256)
    """The tools the run may use, by name, among those the deployment registered
    (``CALLGATE_TOOL_MODULES``); None means every registered tool.  A spec never names code."""
    max_turns: int = Field(default=10, ge=1, le=1000)
    max_total_tokens: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    """Wall-clock budget from the moment the run is created."""
    acceptance: AcceptanceRule | None = None
    """A rule for the final answer (`callgate.tools.acceptance`): contains, json_schema or
    validator, typed so that a rule no check understands is refused here."""
    batch_policy: BatchPolicy = "hold_effects"
    """While calls wait for a human: ``hold_effects`` runs only reads until the whole batch is
    decided; ``run_allowed`` also runs the allowed writes at once."""
    approval_ttl_s: float | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    """How long a human has to decide a call of this run (default: CALLGATE_APPROVAL_TTL_S)."""

    @field_validator("identity")
    @classmethod
    def _identity_names_user(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        user = value.get("user")
        if not isinstance(user, str) or not user.strip():
            raise ValueError('identity must name a non-empty "user"')
        return value


def parse_spec(data: object) -> RunSpec:
    """Validate ``data`` (a JSON object) as a `RunSpec`, or raise `RunSpecError`."""
    if isinstance(data, RunSpec):
        return data
    if not isinstance(data, dict):
        raise RunSpecError([f"a run spec is a JSON object, not {type(data).__name__}"])
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise RunSpecError([_problem(e) for e in exc.errors()]) from exc


NAMES_CODE = {
    "tool_modules": "a run may not name code to import: the deployment registers tool modules "
    "(CALLGATE_TOOL_MODULES) and a run selects its tools by name (allowed_tools)"
}
"""Fields older specs had that named code; refused with what to do instead."""


def _problem(error: Any) -> str:
    parts = [str(p) for p in error["loc"]]
    # A tagged union (the acceptance rule) repeats its tag in the location: say it once.
    where = ".".join(p for i, p in enumerate(parts) if i == 0 or p != parts[i - 1]) or "spec"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = NAMES_CODE.get(where, "unknown field")
    elif error["type"] == "missing":
        message = "required"
    return f"{where}: {message}"


def with_run_id(spec: RunSpec) -> RunSpec:
    """The spec with a run id, minting one if the caller left it out: ``<tenant>.<random>``
    for a tenant's run (`callgate.auth.tenancy`), ``run-<random>`` otherwise."""
    if spec.run_id is not None:
        return spec
    tenant = (spec.identity or {}).get(TENANT_FIELD)
    prefix = run_id_prefix(tenant) if is_tenant_name(tenant) else "run-"
    return spec.model_copy(update={"run_id": f"{prefix}{new_id()}"})


def spec_hash(spec: RunSpec, identity: Mapping[str, Any]) -> str:
    """What makes two starts of one run id the same request: the spec as validated (so a
    default left out and the same default written out agree) and the identity the deployment
    verified for it (the same spec from someone else is a different request)."""
    return args_hash({"spec": spec.model_dump(mode="json"), "identity": dict(identity)})


def to_run_record(
    spec: RunSpec, now_ms: int, allowed_tools: list[str], identity: dict[str, Any], vouched_by: str
) -> RunRecord:
    """The run record a new run starts with: awaiting the model for turn 1, allowed exactly
    ``allowed_tools`` (the spec's selection, checked against the deployment's registry), for
    the ``identity`` the deployment verified."""
    if spec.run_id is None:
        raise RunSpecError(["run_id: required to create a run"])
    deadline_ms = None if spec.deadline_s is None else now_ms + int(spec.deadline_s * 1000)
    return RunRecord(
        run_id=spec.run_id,
        status=RunState.AWAITING_MODEL,
        api=spec.api,
        model=spec.model,
        instructions=spec.instructions,
        input=spec.input,
        turn=1,
        max_turns=spec.max_turns,
        max_total_tokens=spec.max_total_tokens,
        deadline_ms=deadline_ms,
        identity=identity,
        vouched_by=vouched_by,
        allowed_tools=allowed_tools,
        spec_hash=spec_hash(spec, identity),
        batch_policy=spec.batch_policy,
        approval_ttl_s=spec.approval_ttl_s,
        acceptance=None
        if spec.acceptance is None
        else spec.acceptance.model_dump(mode="json", exclude_none=True),
        created_ms=now_ms,
        updated_ms=now_ms,
    )
