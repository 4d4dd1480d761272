"""Per-call validation: every rejection code, in order, structured, and nothing executed."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from callgate.errors import ToolError
from callgate.records import ErrorDetail
from callgate.standins.demo import travel
from callgate.tools.canonical import args_hash
from callgate.tools.contract import Effect, Reconciliation, Tool, ToolContext
from callgate.tools.json_guard import duplicate_key, exceeds_depth
from callgate.tools.policy import (
    Decision,
    Identity,
    Limits,
    ProposedCall,
    Rejection,
    check_preconditions,
    decide,
    decide_batch,
)
from callgate.tools.registry import ToolRegistry

EXECUTED: list[str] = []
"""Every execute/reconcile of the test tools appends here; decisions must leave it empty."""


class TransferArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(pattern=r"^acct-[0-9]+$")
    amount: int = Field(gt=0)


async def _transfer(ctx: ToolContext, args: TransferArgs, operation_id: str) -> dict[str, Any]:
    EXECUTED.append(operation_id)
    return {"ok": True}


async def _reconcile(ctx: ToolContext, args: TransferArgs, operation_id: str) -> Reconciliation:
    EXECUTED.append(operation_id)
    return Reconciliation("unknown")


async def _funded(ctx: ToolContext, args: TransferArgs) -> str | None:
    if args.account == "acct-0":
        raise ToolError("account acct-0 is closed")
    if args.account == "acct-9":
        raise RuntimeError("ledger said 401 to Bearer eyJhbGciOi.secret")
    return "insufficient funds" if args.amount > 1000 else None


transfer = Tool(
    name="transfer", version="3", description="Move money.", args_model=TransferArgs,
    effect=Effect.WRITE, execute=_transfer, reconcile=_reconcile, preconditions=_funded,
    approval=lambda who, a: "finance" if a.amount > 100 else None,
    resource_key=lambda a: f"account:{a.account}",
)  # fmt: skip
wipe = Tool(
    name="secret_wipe", version="1", description="Not for this run.", args_model=TransferArgs,
    effect=Effect.WRITE, execute=_transfer, reconcile=_reconcile,
)  # fmt: skip

REGISTRY = ToolRegistry([*travel.TOOLS, transfer, wipe])
ALLOWED = ("get_train_status", "get_weather", "transfer")
LIMITS = Limits()
ALICE = {"user": "alice"}
G1234 = '{"train_number": "G1234", "date": "2026-12-20"}'


@pytest.fixture(autouse=True)
def _nothing_executed() -> Any:
    EXECUTED.clear()
    yield
    assert EXECUTED == [], "a policy decision executed a tool"


def _decide(
    name: str, raw: str, *, identity: Any = ALICE, limits: Limits = LIMITS, allowed: Any = ALLOWED
) -> Decision:
    return decide(
        REGISTRY, allowed_tools=allowed, identity=identity, name=name, raw_arguments=raw,
        limits=limits,
    )  # fmt: skip


def _assert_rejected(decision: Decision, code: Rejection, *fragments: str) -> None:
    assert decision.outcome == "rejected"
    assert decision.error is not None and decision.error.code == code.value
    assert set(decision.error.model_dump()) == {"code", "message"}
    for fragment in fragments:
        assert fragment in decision.error.message
    assert decision.tool is None and not decision.executable  # nothing to call


def test_allowed_call_carries_canonical_arguments_and_hash() -> None:
    d = _decide("get_train_status", '{"date":"2026-12-20",  "train_number":"G1234"}')
    assert d.outcome == "allowed" and d.executable and d.error is None
    assert d.tool is travel.get_train_status and d.tool_version == "1"
    assert d.arguments == {"train_number": "G1234", "date": "2026-12-20"}
    assert d.canonical_arguments == '{"date":"2026-12-20","train_number":"G1234"}'
    assert d.args_hash == args_hash(d.arguments)
    assert d.args_hash == _decide("get_train_status", G1234).args_hash  # key order irrelevant


def test_unknown_tool_lists_only_the_runs_tools() -> None:
    d = _decide("delete_everything", "{}")
    _assert_rejected(d, Rejection.UNKNOWN_TOOL, "'delete_everything'", "get_weather")
    assert d.error is not None and "secret_wipe" not in d.error.message
    long = _decide("x" * 5000, "{}")
    assert long.error is not None and len(long.error.message) < 300


def test_tool_not_on_allow_list() -> None:
    d = _decide("secret_wipe", '{"account": "acct-1", "amount": 1}')
    _assert_rejected(d, Rejection.TOOL_NOT_ALLOWED, "secret_wipe")
    assert d.tool_version == "1"


def test_size_is_checked_before_parsing() -> None:
    limits = Limits(max_argument_bytes=100)
    # Neither valid JSON nor shallow: only the size check may speak.
    _assert_rejected(
        _decide("get_weather", "[" * 101, limits=limits), Rejection.ARGUMENTS_TOO_LARGE
    )
    # 60 characters but 120 bytes: the limit is on UTF-8 bytes.
    raw = '{"city": "' + "é" * 50 + '", "date": "2026-12-20"}'
    _assert_rejected(
        _decide("get_weather", raw, limits=limits), Rejection.ARGUMENTS_TOO_LARGE, "100"
    )


def test_depth_check_on_10000_deep_json() -> None:
    limits = Limits(max_argument_bytes=1_000_000)
    for raw in ("[" * 10_000 + "]" * 10_000, '{"a":' * 10_000 + "1" + "}" * 10_000):
        d = _decide("get_weather", raw, limits=limits)
        _assert_rejected(d, Rejection.ARGUMENTS_TOO_DEEP, "8")
    assert exceeds_depth("[" * 10_000, 9_999) and not exceeds_depth("[" * 10_000, 10_000)


def test_depth_ignores_brackets_in_strings() -> None:
    assert not exceeds_depth(r'{"city": "[[[[{{{{\"[[[[", "date": "x"}', 1)
    assert exceeds_depth('{"a": [1]}', 1) and not exceeds_depth('{"a": [1]}', 2)
    deep_city = '{"city": "' + "[" * 50 + '", "date": "2026-12-20"}'
    assert _decide("get_weather", deep_city).outcome == "allowed"


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"), ("null", "JSON object"),
     ('{"city": NaN}', "not valid JSON"), ('{"a": 1} trailing', "not valid JSON")],
)  # fmt: skip
def test_invalid_json(raw: str, fragment: str) -> None:
    _assert_rejected(_decide("get_weather", raw), Rejection.INVALID_JSON, fragment)


_KEYS = st.sampled_from(["a", "b", 'q"', "c:", "x\\", "é", '":'])
_SPACE = st.sampled_from(["", " ", "\n\t"])


def _json_text(draw: Any, depth: int) -> str:
    """JSON text whose objects may repeat keys, with keys and strings that look like keys."""
    kind = draw(st.sampled_from(["object", "list", "scalar"] if depth < 3 else ["scalar"]))
    if kind == "scalar":
        return json.dumps(draw(st.one_of(st.integers(), _KEYS, st.none())))
    items = draw(st.lists(st.just(None), max_size=4))
    if kind == "list":
        return "[" + ",".join(_json_text(draw, depth + 1) for _ in items) + "]"
    pairs = [
        json.dumps(draw(_KEYS)) + draw(_SPACE) + ":" + draw(_SPACE) + _json_text(draw, depth + 1)
        for _ in items
    ]
    return "{" + ",".join(pairs) + "}"


@given(st.composite(lambda draw: _json_text(draw, 0))())
@settings(max_examples=300, deadline=None)
def test_duplicate_key_check_with_a_parse_in_hand_agrees_with_the_full_check(raw: str) -> None:
    assert duplicate_key(raw, json.loads(raw)) == duplicate_key(raw)


def test_duplicate_keys_are_refused() -> None:
    assert duplicate_key('{"a": {"b": 1, "b": 2}}') == "b"
    assert duplicate_key('{"a": {"b": 1}, "b": 2}') is None
    raw = '{"train_number": "G1234", "date": "2026-12-20", "train_number": "D567"}'
    _assert_rejected(_decide("get_train_status", raw), Rejection.INVALID_JSON, "'train_number'")


def test_integers_beyond_64_bits_are_rejected_not_crashing() -> None:
    d = _decide("transfer", '{"account": "acct-1", "amount": 100000000000000000000000000}')
    _assert_rejected(d, Rejection.INVALID_ARGUMENTS, "out of range")


def test_malformed_train_number_rejected_by_schema() -> None:
    d = _decide("get_train_status", '{"train_number": "X99", "date": "2026-12-20"}')
    _assert_rejected(
        d, Rejection.INVALID_ARGUMENTS, "get_train_status", "train_number",
        "should match pattern '^[GDCZTK][0-9]{1,4}$'",
    )  # fmt: skip
    assert d.error is not None and "X99" not in d.error.message  # no echo of values


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        ('{"train_number": "G1234", "date": "2026-12-20", "as_admin": true}',
         ("as_admin", "Extra inputs are not permitted")),
        ('{"train_number": "G1234"}', ("date: Field required",)),
        ('{"train_number": 1234, "date": "2026-12-20"}', ("train_number", "valid string")),
        ('{"train_number": "G1234", "date": "2026-02-30"}', ("date", "day is out of range")),
        ("", ("train_number: Field required", "date: Field required")),
    ],
)  # fmt: skip
def test_schema_errors_are_field_level(raw: str, fragments: tuple[str, ...]) -> None:
    _assert_rejected(_decide("get_train_status", raw), Rejection.INVALID_ARGUMENTS, *fragments)


def test_alice_and_bob_scopes() -> None:
    d567 = '{"train_number": "D567", "date": "2026-12-20"}'
    assert _decide("get_train_status", G1234, identity={"user": "alice"}).outcome == "allowed"
    assert _decide("get_train_status", d567, identity={"user": "bob"}).outcome == "allowed"
    _assert_rejected(
        _decide("get_train_status", d567, identity={"user": "alice"}),
        Rejection.NOT_AUTHORIZED, "'alice' may not query train D567",
    )  # fmt: skip
    _assert_rejected(
        _decide("get_train_status", G1234, identity=Identity(user="bob")), Rejection.NOT_AUTHORIZED
    )
    other_day = '{"train_number": "G1234", "date": "2026-12-21"}'
    _assert_rejected(_decide("get_train_status", other_day), Rejection.NOT_AUTHORIZED)
    admin = {"user": "carol", "roles": ["travel_admin"], "team": "ops"}
    assert _decide("get_train_status", d567, identity=admin).outcome == "allowed"
    weather = '{"city": "Hangzhou", "date": "2026-12-20"}'
    assert _decide("get_weather", weather, identity={"user": "bob"}).outcome == "allowed"


def test_invalid_identity_is_not_authorized() -> None:
    d = _decide("get_weather", '{"city": "Hangzhou", "date": "2026-12-20"}', identity={})
    _assert_rejected(d, Rejection.NOT_AUTHORIZED, "identity")


def test_approval_rule_names_the_role() -> None:
    big = _decide("transfer", '{"account": "acct-1", "amount": 500}')
    assert big.outcome == "needs_approval" and big.approver_role == "finance"
    assert big.tool is transfer and not big.executable and big.args_hash is not None
    small = _decide("transfer", '{"account": "acct-1", "amount": 5}')
    assert small.outcome == "allowed" and small.approver_role is None


async def test_preconditions_are_a_separate_async_step() -> None:
    async with aiohttp.ClientSession() as session:
        ctx = ToolContext(
            run_id="r1", call_id="c1", turn=1, identity=Identity(user="alice"), session=session
        )
        ok = _decide("transfer", '{"account": "acct-1", "amount": 50}')
        assert ok.arguments is not None
        assert await check_preconditions(transfer, ctx, ok.arguments) is None
        poor = {"account": "acct-1", "amount": 5000}
        assert await check_preconditions(transfer, ctx, poor) == ErrorDetail(
            code="precondition_failed", message="insufficient funds"
        )
        closed = transfer.validate({"account": "acct-0", "amount": 5})
        error = await check_preconditions(transfer, ctx, closed)
        assert error is not None and error.message == "account acct-0 is closed"
        rejected = ok.reject(error)
        _assert_rejected(rejected, Rejection.PRECONDITION_FAILED, "closed")
        assert rejected.args_hash == ok.args_hash  # what was refused stays recorded


async def test_a_precondition_that_raises_is_a_failed_precondition_not_a_crash() -> None:
    """Redelivering the batch would raise again until it is dead-lettered and the run fails;
    instead the call is refused with the (redacted) exception, and the turn goes on."""
    async with aiohttp.ClientSession() as session:
        ctx = ToolContext(
            run_id="r1", call_id="c1", turn=1, identity=Identity(user="alice"), session=session
        )
        error = await check_preconditions(transfer, ctx, {"account": "acct-9", "amount": 5})
    assert error == ErrorDetail(
        code="precondition_failed",
        message="the precondition could not be checked: RuntimeError: ledger said 401 to "
        "[redacted]",
    )


def _batch(calls: list[ProposedCall], limits: Limits = LIMITS) -> list[Decision]:
    return decide_batch(REGISTRY, allowed_tools=ALLOWED, identity=ALICE, calls=calls, limits=limits)


def test_batch_rejects_duplicate_call_ids() -> None:
    weather = '{"city": "Shanghai", "date": "2026-12-20"}'
    decisions = _batch([
        ProposedCall("c1", "get_train_status", G1234),
        ProposedCall("c2", "get_weather", weather),
        ProposedCall("c1", "get_weather", weather),
    ])  # fmt: skip
    assert [d.call_id for d in decisions] == ["c1", "c2", "c1"]
    assert [d.outcome for d in decisions] == ["allowed", "allowed", "rejected"]
    _assert_rejected(decisions[2], Rejection.DUPLICATE_CALL_ID, "'c1'")


def test_batch_rejects_calls_past_the_limit_never_drops_them() -> None:
    calls = [ProposedCall(f"c{i}", "get_train_status", G1234) for i in range(5)]
    decisions = _batch(calls, Limits(max_calls_per_turn=3))
    assert len(decisions) == 5
    assert [d.outcome for d in decisions] == ["allowed"] * 3 + ["rejected"] * 2
    for d in decisions[3:]:
        _assert_rejected(d, Rejection.TOO_MANY_CALLS, "at most 3")


def test_batch_decides_each_call_independently() -> None:
    decisions = _batch([
        ProposedCall("a", "nope", "{}"),
        ProposedCall("b", "get_train_status", '{"train_number": "X1", "date": "2026-12-20"}'),
        ProposedCall("c", "get_train_status", G1234),
    ])  # fmt: skip
    assert [(d.call_id, d.outcome) for d in decisions] == [
        ("a", "rejected"), ("b", "rejected"), ("c", "allowed"),
    ]  # fmt: skip
    assert [d.error.code if d.error else None for d in decisions] == [
        "unknown_tool", "invalid_arguments", None,
    ]  # fmt: skip


_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
_json_value = st.recursive(
    _leaf,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=30,
)
_near_schema = st.fixed_dictionaries(
    {"train_number": st.from_regex(r"[GDX][0-9]{1,5}", fullmatch=True) | _leaf,
     "date": st.sampled_from(["2026-12-20", "2026-12-21", "1767225600"]) | _leaf},
    optional={"extra": _json_value},
) | st.fixed_dictionaries(
    {"account": st.sampled_from(["acct-0", "acct-1", "x"]), "amount": st.integers() | _leaf},
    optional={"extra": _json_value},
)  # fmt: skip
json_text = (_json_value | _near_schema).map(json.dumps)  # json allows NaN and huge ints


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), json_text))
def test_decide_never_raises_on_model_output(raw: str) -> None:
    for name in ("get_train_status", "transfer"):
        d = _decide(name, raw)
        assert d.outcome in ("allowed", "rejected", "needs_approval")
        assert (d.error is None) == (d.outcome != "rejected")
        if d.tool is not None:  # the executor's rebuild gives back the very same arguments
            assert d.arguments is not None
            assert d.tool.dump(d.tool.validate(d.arguments)) == d.arguments
            assert d.args_hash == args_hash(d.arguments)
