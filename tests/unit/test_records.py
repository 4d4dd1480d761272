"""Records ↔ Redis hash mapping, the Tx builder's encoding, and event redaction (pure)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from redis.crc import key_slot

from callgate.hash_fields import encode_fields
from callgate.ledger.group import APPLY_SHA, step_command
from callgate.ledger.tx import CODES, Tx, slot_of
from callgate.records import (
    RAW_ARGUMENTS_MAX_BYTES,
    CallRecord,
    Event,
    RunRecord,
    entry_events,
    error_result,
    event_order,
    ok_result,
    read_from,
)
from callgate.redact import REDACTED, redact, redact_error, scrub, sensitive_values
from callgate.states import CallState, RunState


def _as_redis(mapping: dict[str, str | bytes]) -> dict[bytes, bytes]:
    """What HGETALL gives back for what HSET stored."""
    return {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in mapping.items()}


def _full_run() -> RunRecord:
    return RunRecord(
        run_id="run-1",
        status=RunState.EXECUTING,
        api="anthropic-messages",
        model="claude-x",
        instructions="be brief",
        input="book a flight",
        turn=3,
        max_turns=7,
        max_total_tokens=5000,
        deadline_ms=1_700_000_000_000,
        usage_input_tokens=120,
        usage_output_tokens=45,
        identity={"user": "u1", "roles": ["agent"], "scope": {"account": 7}},
        allowed_tools=["search", "book"],
        batch_policy="run_allowed",
        acceptance={"kind": "regex", "pattern": "^OK"},
        final_text="",
        reason="ü unicode ✓",
        created_ms=1,
        updated_ms=2,
        extra={"future": {"x": [1, 2]}},
    )


def test_run_round_trip_full_and_minimal() -> None:
    full = _full_run()
    assert RunRecord.from_hash(_as_redis(full.to_hash())) == full
    minimal = RunRecord(run_id="r", api="openai-chat", model="m", input="")
    stored = minimal.to_hash()
    assert "instructions" not in stored and "deadline_ms" not in stored  # None = absent
    assert RunRecord.from_hash(_as_redis(stored)) == minimal
    assert RunRecord.from_hash(stored) == minimal  # decoded replies work too


def test_hash_fields_are_raw_where_redis_reads_them() -> None:
    stored = _full_run().to_hash()
    assert stored["status"] == "executing"  # the CAS guard compares this value
    assert stored["turn"] == "3"
    assert stored["usage_input_tokens"] == "120"  # HINCRBY adds to this
    assert orjson.loads(stored["identity"]) == {
        "user": "u1",
        "roles": ["agent"],
        "scope": {"account": 7},
    }


def test_empty_allowed_tools_is_not_none() -> None:
    run = RunRecord(run_id="r", api="openai-chat", model="m", input="x", allowed_tools=[])
    assert RunRecord.from_hash(_as_redis(run.to_hash())).allowed_tools == []


def test_unknown_hash_fields_are_ignored() -> None:
    stored = _as_redis(_full_run().to_hash())
    stored[b"written_by_a_newer_version"] = b"whatever"
    assert RunRecord.from_hash(stored) == _full_run()


def test_call_round_trip() -> None:
    call = CallRecord(
        run_id="run-1", call_id="t1.0", turn=1, index=0, provider_call_id="call_abc",
        tool="book", tool_version="2", arguments={"flight": "LH1", "seats": 2},
        raw_arguments='{"flight": "LH1", "seats": 2}', args_hash="h", effect="write",
        resource_key="flight:LH1", state=CallState.SUCCEEDED, decision="allow", reason=None,
        approval_id="a1", operation_id="op1", attempts=1,
        result=ok_result({"booking": "B7", "nested": [None, 1.5]}), executor="exec-1",
        created_ms=10, updated_ms=11,
    )  # fmt: skip
    assert CallRecord.from_hash(_as_redis(call.to_hash())) == call
    failed = call.model_copy(update={"result": error_result("tool_error", "no seats")})
    assert CallRecord.from_hash(_as_redis(failed.to_hash())).result == error_result(
        "tool_error", "no seats"
    )
    assert orjson.loads(failed.to_hash()["result"]) == {
        "status": "error", "error": {"code": "tool_error", "message": "no seats"},
    }  # fmt: skip


def test_raw_arguments_are_cut_at_a_character_boundary() -> None:
    raw = "é" * RAW_ARGUMENTS_MAX_BYTES  # two bytes each
    call = CallRecord(
        run_id="r", call_id="c", turn=1, index=0, provider_call_id="p", tool="t", raw_arguments=raw
    )
    assert len(call.raw_arguments.encode()) <= RAW_ARGUMENTS_MAX_BYTES
    assert call.raw_arguments == "é" * (RAW_ARGUMENTS_MAX_BYTES // 2)


def test_result_must_have_a_known_shape() -> None:
    with pytest.raises(ValidationError):
        CallRecord(
            run_id="r", call_id="c", turn=1, index=0, provider_call_id="p", tool="t",
            result={"status": "maybe"},
        )  # fmt: skip


def test_encode_fields_validates_and_deletes_none() -> None:
    to_set, to_delete = encode_fields(
        CallRecord, {"attempts": 2, "reason": None, "result": ok_result(1), "state": "failed"}
    )
    assert to_set["attempts"] == "2" and to_set["state"] == "failed"
    assert orjson.loads(to_set["result"]) == {"status": "ok", "payload": 1}
    assert to_delete == ["reason"]
    with pytest.raises(ValueError, match="no field"):
        encode_fields(CallRecord, {"nope": 1})
    with pytest.raises(ValidationError):
        encode_fields(CallRecord, {"state": "flying"})
    with pytest.raises(ValidationError):
        encode_fields(CallRecord, {"result": {"status": "ok"}})
    cut, _ = encode_fields(CallRecord, {"raw_arguments": "x" * (RAW_ARGUMENTS_MAX_BYTES + 9)})
    assert len(cut["raw_arguments"]) == RAW_ARGUMENTS_MAX_BYTES


@given(
    st.sampled_from(list(CallState)),
    st.integers(0, 2**40),
    st.text(max_size=12),
    st.sampled_from(["read", "idempotent_write", "write"]),
    st.sampled_from(list(RunState)),
    st.lists(st.text(max_size=8), max_size=3),
    st.sampled_from(["hold_effects", "run_allowed"]),
)
def test_encoding_a_field_alone_matches_the_whole_record(
    state: CallState,
    attempts: int,
    executor: str,
    effect: str,
    status: RunState,
    modules: list[str],
    batch_policy: str,
) -> None:
    """Exact str, int and enum values, Literal strings and lists of strings skip pydantic
    (`encode_fields`); they must still be encoded as the record writes them."""
    call = CallRecord(
        run_id="r", call_id="c", turn=1, index=0, provider_call_id="p", tool="t",
        state=state, attempts=attempts, executor=executor, effect=effect,
    )  # fmt: skip
    fields: dict[str, Any] = {
        "state": state, "attempts": attempts, "executor": executor, "effect": effect,
    }  # fmt: skip
    assert encode_fields(CallRecord, fields)[0] == {n: call.to_hash()[n] for n in fields}
    run = RunRecord(
        run_id="r", api="openai-chat", model="m", input="x", status=status,
        allowed_tools=modules, batch_policy=batch_policy,
    )  # fmt: skip
    fields = {
        "status": status, "allowed_tools": tuple(modules),
        "batch_policy": batch_policy,
    }  # fmt: skip
    assert encode_fields(RunRecord, fields)[0] == {n: run.to_hash()[n] for n in fields}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(
    call_id=st.text(max_size=130),
    index=st.integers(-3, 2**40),
    effect=st.sampled_from(["read", "write", "idempotent_write", "fly", ""]),
)
def test_a_bounded_field_skips_pydantic_only_within_its_bounds(
    call_id: str, index: int, effect: str
) -> None:
    """A call id (1 to 128 characters), an index (>= 0) and an effect given as its string are
    encoded without pydantic when the record would take them, as the record writes them;
    anything the record refuses is still refused."""
    fields = {"call_id": call_id, "index": index, "effect": effect}
    try:
        call = CallRecord(
            run_id="r", call_id=call_id, turn=1, index=index, provider_call_id="p", tool="t",
            effect=effect,
        )  # fmt: skip
    except ValidationError:
        with pytest.raises(ValidationError):
            encode_fields(CallRecord, fields)
        return
    assert encode_fields(CallRecord, fields)[0] == {n: call.to_hash()[n] for n in fields}


any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(arguments=st.dictionaries(st.text(max_size=10), any_json, max_size=4) | st.none())
def test_an_object_field_encodes_as_the_whole_record_does(arguments: dict[str, Any] | None) -> None:
    """A dict of JSON's own types skips pydantic (`encode_fields`); with floats (NaN too) and
    tuples among them, or None, it must still be what the record writes (or leaves out)."""
    call = CallRecord(
        run_id="r", call_id="c", turn=1, index=0, provider_call_id="p", tool="t",
        arguments=arguments,
    )  # fmt: skip
    to_set, to_delete = encode_fields(CallRecord, {"arguments": arguments})
    assert to_set == {n: v for n, v in call.to_hash().items() if n == "arguments"}
    assert to_delete == ([] if arguments is not None else ["arguments"])
    with pytest.raises(ValidationError):  # None clears only a field that may be absent
        encode_fields(CallRecord, {"tool": None})


@given(
    identity=st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    text=st.text(max_size=50),
    turn=st.integers(0, 10_000),
)
def test_run_round_trip_property(identity: dict[str, Any], text: str, turn: int) -> None:
    run = RunRecord(
        run_id="r", api="openai-responses", model=text or "m", input=text, instructions=text,
        identity=identity, turn=turn, extra={"v": identity},
    )  # fmt: skip
    assert RunRecord.from_hash(_as_redis(run.to_hash())) == run


def test_events_from_stream_entries_of_one_event_and_of_a_step_of_several() -> None:
    one = entry_events(b"1-0", {b"t": b"5", b"type": b"run.created", b"d": b'{"a":1}'})
    assert one == [Event(id="1-0", t_ms=5, type="run.created", data={"a": 1})]
    tx = Tx("a_step").event("{a}e", "call.transition", b'{"b":2}', 7)
    tx.event("{a}e", "run.transition", b'{"c":3}', 8).event("{a}e", "x.y", b"{}", 9)
    _, argv = tx.encode()  # the step's one XADD: its fields follow the shape
    fields = dict(zip(argv[1::2], argv[2::2], strict=True))
    stored = {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}
    assert entry_events("2-3", stored) == [
        Event(id="2-3", t_ms=7, type="call.transition", data={"b": 2}),
        Event(id="2-3.1", t_ms=7, type="run.transition", data={"c": 3}),
        Event(id="2-3.2", t_ms=7, type="x.y", data={}),
    ]


def test_event_ids_order_within_and_across_entries_and_a_read_misses_none() -> None:
    ids = ["0-0", "1-0", "1-0.1", "1-0.2", "1-1", "2-0"]
    assert sorted(ids, key=event_order) == ids
    assert [read_from(i) for i in ("0-0", "1-0.2", "1-1", "2-0")] == [
        "0-0", "0-18446744073709551615", "1-0", "1-18446744073709551615",
    ]  # fmt: skip


# ---- redaction ------------------------------------------------------------------------------


def test_redact_removes_secrets_and_keeps_the_rest() -> None:
    data = {
        "api_key": "k", "Authorization": "Bearer abc", "headers": {"X-Api-Key": "k2"},
        "client_secret": "s", "password": "p", "refresh_token": "t", "token": "t",
        "usage_input_tokens": 12, "author": "ann", "note": "Bearer eyJhbGciOi",
        "key": "sk-abcdefghijklmnop1234", "items": [{"secret": 1}, {"card": "4111"}],
    }  # fmt: skip
    clean = redact(data, sensitive={"card"})
    for name in ("api_key", "Authorization", "client_secret", "password", "refresh_token",
                 "token", "note", "key"):  # fmt: skip
        assert clean[name] == REDACTED, name
    assert clean["headers"] == {"X-Api-Key": REDACTED}
    assert clean["items"] == [{"secret": REDACTED}, {"card": REDACTED}]
    assert clean["usage_input_tokens"] == 12 and clean["author"] == "ann"
    assert data["api_key"] == "k"  # the input is not changed


def test_redact_cuts_long_strings() -> None:
    clean = redact({"final_text": "x" * 5000})
    assert len(clean["final_text"]) < 600 and clean["final_text"].endswith("chars)")


def test_redact_matches_secret_values_in_any_case() -> None:
    looks_secret = ["\u017fk-abcdefghijklmnop", "SK-ANT-x", "sunny"]
    assert redact(looks_secret) == [REDACTED, REDACTED, "sunny"]


def test_sensitive_values_are_the_scalars_under_marked_keys_at_any_depth() -> None:
    arguments = {"email": "a@b.example", "card": {"number": 4111111111111111, "cvc": 123},
                 "seat": "12A", "note": "email me"}  # fmt: skip
    result = {"status": "ok", "payload": [{"email": "a@b.example", "ok": True}]}
    found = sensitive_values([arguments, result], {"email", "card"})
    assert found == {"a@b.example", "4111111111111111"}  # "123" is too short to scrub


def test_scrub_replaces_values_as_written_and_json_escaped_longest_first() -> None:
    text = 'Held for a@b.example; raw: {"name":"O\\"Neil x"} and a@b.example.org'
    clean = scrub(text, {"a@b.example", 'O"Neil x', "a@b.example.org"})
    assert clean == f'Held for {REDACTED}; raw: {{"name":"{REDACTED}"}} and {REDACTED}'
    assert scrub("nothing marked", set()) == "nothing marked"


def test_an_exception_is_described_without_its_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "planted-env-secret")
    exc = RuntimeError(
        "GET redis://w:pa55word@db/0 as Bearer abc.def, key planted-env-secret, "
        "card 4111111111111111, x" + "y" * 600
    )
    text = redact_error(exc, {"4111111111111111"})
    assert text.startswith(
        f"RuntimeError: GET redis://w:{REDACTED}@db/0 as {REDACTED} key "
        f"{REDACTED}, card {REDACTED}, x"
    )
    assert text.endswith("chars)")  # cut like any event string
    assert redact_error(KeyError()) == "KeyError"


# ---- the Tx builder ------------------------------------------------------------------------


@given(st.text(alphabet="{}ab:é", max_size=12))
def test_slot_of_a_key_is_the_one_redis_cluster_gives_it(key: str) -> None:
    assert slot_of(key) == key_slot(key.encode())


def test_tx_refuses_keys_of_two_slots() -> None:
    tx = Tx().hset("cg:{p0}:run:a", {"x": 1})
    with pytest.raises(ValueError, match="slot"):
        tx.xadd("cg:{p1}:exec", {"d": b"x"})
    assert tx.slot == key_slot(b"cg:{p0}:run:a")


CODE = {name: number for number, name in enumerate(CODES, start=1)}
"""Each entry's code as the shape carries it."""


def test_tx_encoding_is_flat_and_reads_each_guarded_key_once() -> None:
    tx = (
        Tx("a_step")
        .expect("{a}k", "state", "x", "y")
        .expect_missing("{a}n")
        .expect_field_missing("{a}k", "lock")
        .expect("{a}k", "state", "x")
        .hset("{a}k", {"f": 1, "g": b"\xff"})
    )
    keys, argv = tx.encode()
    assert keys == ["{a}k", "{a}n"]
    assert argv[0] == bytes(
        [
            *(0, 1, 0, 4),  # one read, four guards
            *(CODE["rd"], 0, 1, 0, 2),  # {a}k's guarded fields, slots 1 and 2
            *(CODE["in"], 0, 1, 0, 2),  # slot 1 is x or y
            *(CODE["nx"], 0, 2, 0, 0),  # key 2 is missing
            *(CODE["fnx"], 0, 2, 0, 0),  # slot 2 is missing
            *(CODE["in"], 0, 1, 0, 1),  # slot 1 is x
            *(CODE["hset"], 0, 1, 0, 4),
        ]
    )
    assert argv[1:] == ["state", "lock", "x", "y", "x", "f", "1", "g", b"\xff"]


def test_a_script_call_carries_its_steps_one_after_another_and_names_them_last() -> None:
    first = Tx("take_call").expect("{a}c", "state", "allowed").hset("{a}c", {"state": "x"})
    second = Tx("settle_call").hset("{a}d", {"f": "1"}).hset("{a}c", {"g": "2"})
    command = step_command([first, second])
    assert command[:3] == ("evalsha", APPLY_SHA, 3)
    assert command[3:6] == ("{a}c", "{a}d", "{a}c")  # each step's own keys, in its own order
    header, *argv = command[6:]
    assert header == bytes([0, 1, 0, 0, 0, 5, 0, 2, 0, 0, 0, 5])  # keys, then arguments
    assert argv == [*first.encode()[1], *second.encode()[1], "take_call+settle_call"]


def test_an_op_on_a_key_the_ledger_vouches_for_is_marked_in_its_code() -> None:
    _, argv = Tx().xadd("{a}e", {"d": "x"}).vouch("{a}s").xadd("{a}s", {"d": "y"}).encode()
    assert argv[0][4:] == bytes([CODE["xadd"], 0, 1, 0, 2, CODE["xadd"] | 0x80, 0, 2, 0, 2])


def test_the_script_and_the_builder_number_entries_alike() -> None:
    lua = (resources.files("callgate.ledger.lua") / "apply.lua").read_text()
    listed = re.search(r"local CODES = \{(.*?)\}", lua, re.S)
    assert listed is not None
    assert tuple(re.findall(r"'(\w+)'", listed.group(1))) == CODES


def test_tx_splits_large_writes_and_rejects_bad_values() -> None:
    tx = Tx().rpush("{a}l", *range(2500))
    assert tx.ops == 3
    with pytest.raises(TypeError):
        Tx().hset("{a}k", {"f": True})
    with pytest.raises(ValueError):
        Tx().hset("{a}k", {})
    with pytest.raises(ValueError):
        Tx().zadd("{a}z", {"m": float("nan")})
    with pytest.raises(ValueError):
        Tx().expire("{a}k", 0)
