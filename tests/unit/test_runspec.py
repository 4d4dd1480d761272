"""RunSpec: strict validation with one clear line per problem; the record a new run starts as."""

from __future__ import annotations

import pytest

from callgate.errors import RunSpecError
from callgate.runspec import RunSpec, parse_spec, to_run_record, with_run_id
from callgate.states import RunState
from callgate.tools.acceptance import ContainsRule, ValidatorRule, check_acceptance
from tests.seed import run_spec as spec


def problems(data: object) -> list[str]:
    with pytest.raises(RunSpecError) as info:
        parse_spec(data)
    assert str(info.value).startswith("invalid run spec: ")
    return info.value.problems


def test_minimal_spec_gets_the_documented_defaults() -> None:
    parsed = parse_spec(spec())
    assert parsed.max_turns == 10
    assert parsed.run_id is None
    assert parsed.allowed_tools == ["get_train_status", "get_weather"]
    assert parse_spec(spec(allowed_tools=None)).allowed_tools is None  # every registered tool
    assert parsed.batch_policy == "hold_effects"


def test_unknown_field_is_named() -> None:
    assert problems(spec(max_turn=3)) == ["max_turn: unknown field"]


def test_missing_required_fields_are_each_named() -> None:
    found = problems({"api": "openai-chat"})
    assert sorted(found) == ["input: required", "model: required"]


def test_identity_must_name_a_user() -> None:
    [problem] = problems(spec(identity={"role": "admin"}))
    assert problem.startswith("identity:") and '"user"' in problem
    [problem] = problems(spec(identity={"user": "  "}))
    assert '"user"' in problem


def test_strict_types_do_not_coerce_strings() -> None:
    [problem] = problems(spec(max_turns="10"))
    assert problem.startswith("max_turns:")


def test_unknown_api_is_rejected_with_the_choices() -> None:
    [problem] = problems(spec(api="openai"))
    assert problem.startswith("api:") and "openai-responses" in problem


def test_a_spec_never_names_code_to_import() -> None:
    [problem] = problems(spec(tool_modules=["callgate.standins.demo.travel"]))
    assert problem.startswith("tool_modules: a run may not name code to import")
    assert "CALLGATE_TOOL_MODULES" in problem and "allowed_tools" in problem
    [problem] = problems(spec(acceptance={"validator": "builtins:exec"}))
    assert problem.startswith("acceptance.validator:") and "never code to import" in problem
    assert parse_spec(spec(acceptance={"validator": "json_answer"})).acceptance == ValidatorRule(
        validator="json_answer"
    )


def test_acceptance_must_be_exactly_one_known_rule() -> None:
    parsed = parse_spec(spec(acceptance={"contains": ["G1234"]}))
    assert parsed.acceptance == ContainsRule(contains=["G1234"])
    for rule in ({"regex": "x"}, {"contains": ["a"], "validator": "v"}, {}, "contains"):
        [problem] = problems(spec(acceptance=rule))
        assert problem.startswith("acceptance: acceptance must be exactly one of"), problem


def test_an_acceptance_rule_of_the_wrong_shape_is_refused_at_submit() -> None:
    """The attack: ``{"contains": [1]}`` was accepted, the tools ran, and the run dead-lettered
    at its end after asking the model five times."""
    assert problems(spec(acceptance={"contains": [1]})) == [
        "acceptance.contains.0: Input should be a valid string"
    ]
    [problem] = problems(spec(acceptance={"contains": []}))
    assert problem.startswith("acceptance.contains:")
    [problem] = problems(spec(acceptance={"json_schema": {"properties": {"a": {"type": ["x"]}}}}))
    assert problem.startswith("acceptance.json_schema.properties.a.type:")
    [problem] = problems(spec(acceptance={"json_schema": {"required": "a"}}))
    assert problem.startswith("acceptance.json_schema.required:")


def test_a_json_schema_keeps_the_keywords_it_does_not_check() -> None:
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"type": "string", "description": "the answer"}},
    }
    record = to_run_record(with_run_id(parse_spec(spec(acceptance={"json_schema": schema}))),
                           1, [], {"user": "alice"}, "local")  # fmt: skip
    assert record.acceptance == {"json_schema": schema}
    assert check_acceptance(record.acceptance, '{"a": 1}', {}) == (
        "the field 'a' must be of type string"
    )
    assert check_acceptance(record.acceptance, '{"a": "x"}', {}) is None


def test_budgets_must_be_positive() -> None:
    found = problems(spec(max_turns=0, deadline_s=-1, max_total_tokens=0))
    assert [p.split(":")[0] for p in found] == ["max_turns", "max_total_tokens", "deadline_s"]


def test_not_an_object() -> None:
    assert problems(["api"]) == ["a run spec is a JSON object, not list"]


def test_run_id_is_minted_once_and_kept() -> None:
    minted = with_run_id(parse_spec(spec()))
    assert minted.run_id is not None and minted.run_id.startswith("run-")
    assert with_run_id(minted) is minted
    assert with_run_id(parse_spec(spec(run_id="r1"))).run_id == "r1"
    [problem] = problems(spec(run_id="bad id with spaces"))
    assert problem.startswith("run_id:")


def test_new_run_record_awaits_the_model_for_turn_one() -> None:
    parsed = RunSpec.model_validate(spec(run_id="r1", deadline_s=2.5, max_turns=3))
    verified = {"user": "alice", "roles": ["events-lead"]}
    run = to_run_record(
        parsed,
        now_ms=1_000,
        allowed_tools=["get_weather"],
        identity=verified,
        vouched_by="service:local",
    )
    assert run.status == RunState.AWAITING_MODEL
    assert run.turn == 1
    assert run.max_turns == 3
    assert run.deadline_ms == 3_500
    assert run.identity == verified and run.vouched_by == "service:local"
    assert run.created_ms == run.updated_ms == 1_000
    assert run.allowed_tools == ["get_weather"]
    with pytest.raises(RunSpecError):
        to_run_record(
            parse_spec(spec()),
            now_ms=0,
            allowed_tools=[],
            identity=verified,
            vouched_by="service:local",
        )
