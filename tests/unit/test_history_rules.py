"""History rules of the three APIs (exact texts from provider-fixtures/RULES.md), step choice.

Accepted histories are shaped like the recorded request-*.json fixtures (values copied, tools
trimmed); each rejected one changes exactly one thing.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from callgate.standins.scripted import history, rules
from callgate.standins.scripted.common import arg_fragments
from callgate.standins.scripted.scenario import Scenario, build_turn, select_step, substitute

C_A, C_B = "call_LWVp74L5HaH2KNvgVz9PJsrj", "call_YnRAWeTyxI91m5uNa5bxXwVO"
RESPONSES_OK: dict[str, Any] = {  # request-parallel-function-call-outputs.json
    "model": "gpt-4o",
    "input": [
        {"content": "What is the location of Londos and London?", "role": "user"},
        {"content": "", "role": "assistant"},
        {
            "arguments": '{"loc_name":"Londos"}',
            "call_id": C_A,
            "name": "get_location",
            "type": "function_call",
        },
        {
            "arguments": '{"loc_name":"London"}',
            "call_id": C_B,
            "name": "get_location",
            "type": "function_call",
        },
        {"call_id": C_A, "output": "Wrong location", "type": "function_call_output"},
        {"call_id": C_B, "output": '{"lat": 51, "lng": 0}', "type": "function_call_output"},
    ],
}
RESPONSES_REASONING: dict[str, Any] = {  # request-reasoning-function-call-output.json
    "model": "gpt-5.5",
    "input": [
        {"content": "What is the capital of PotatoLand?", "role": "user"},
        {
            "encrypted_content": "gAAAA",
            "id": "rs_0fabc13af1ee0049006a691dfe60b081a1baa444d3cf19afba",
            "summary": [],
            "type": "reasoning",
        },
        {
            "content": [{"annotations": [], "text": "I'll check.", "type": "output_text"}],
            "id": "msg_0fabc13af1ee0049006a691dfebdc881a1ae18d027c313d8ce",
            "phase": "commentary",
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
        {
            "arguments": '{"country":"PotatoLand"}',
            "call_id": "call_LabG58Uhrq9kZvR52BYKjToD",
            "id": "fc_0fabc13af1ee0049006a691dff0c1481a1b4a0eec7e3c753bb",
            "name": "get_capital",
            "type": "function_call",
        },
        {
            "call_id": "call_LabG58Uhrq9kZvR52BYKjToD",
            "output": "Potato City",
            "type": "function_call_output",
        },
    ],
}
T_A, T_B = "call_jYdIdRZHxZTn5bWCq5jlMrJi", "call_TmlTVWQbzrXCZ4jNsCVNbNqu"
CHAT_OK: dict[str, Any] = {  # request-tool-messages.json
    "model": "gpt-4o",
    "messages": [
        {"content": "Just call tools without asking for confirmation.", "role": "system"},
        {"content": "Delete the file `.env` and create `test.txt`", "role": "user"},
        {
            "content": None,
            "role": "assistant",
            "tool_calls": [
                {
                    "function": {"arguments": '{"path": ".env"}', "name": "delete_file"},
                    "id": T_A,
                    "type": "function",
                },
                {
                    "function": {"arguments": '{"path": "test.txt"}', "name": "create_file"},
                    "id": T_B,
                    "type": "function",
                },
            ],
        },
        {"content": "true", "role": "tool", "tool_call_id": T_A},
        {"content": "Success", "role": "tool", "tool_call_id": T_B},
    ],
}
U1, U2 = "toolu_0167cfEnoQaPviGdVXA95zcu", "toolu_01EEe2V5HD1Ac4rKiUR4HD2T"
ANTHROPIC_OK: dict[str, Any] = {  # request-tool-results.json (two of the four calls)
    "model": "claude-haiku-4-5",
    "max_tokens": 4096,
    "tools": [{"name": "retrieve_entity_info", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": [{"text": "Who is the youngest?", "type": "text"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "I'll retrieve their info.", "type": "text"},
                {
                    "id": U1,
                    "input": {"name": "Alice"},
                    "name": "retrieve_entity_info",
                    "type": "tool_use",
                },
                {
                    "id": U2,
                    "input": {"name": "Bob"},
                    "name": "retrieve_entity_info",
                    "type": "tool_use",
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "content": "alice is bob's wife",
                    "is_error": False,
                    "tool_use_id": U1,
                    "type": "tool_result",
                },
                {
                    "content": "bob is alice's husband",
                    "is_error": False,
                    "tool_use_id": U2,
                    "type": "tool_result",
                },
            ],
        },
    ],
}
ANTHROPIC_A2_RECORDED: dict[str, Any] = {  # request-invalid-tool-result-without-tool-use.json
    "model": "claude-haiku-4-5",
    "max_tokens": 1024,
    "messages": [
        {"role": "user", "content": "What's the weather in SF in Celsius?"},
        {
            "role": "user",
            "content": [
                {
                    "tool_use_id": "toolu_01GHndag5wQmbzNihYmV2UBj",
                    "type": "tool_result",
                    "content": "The weather in San Francisco, CA is currently sunny with 20°C.",
                }
            ],
        },
    ],
}


def mutate(body: dict[str, Any], key: str, fn: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    fn(out[key])
    return out


# -- Responses ---------------------------------------------------------------------------


@pytest.mark.parametrize("body", [RESPONSES_OK, RESPONSES_REASONING, {"input": "hi"}])
def test_responses_accepts_recorded_histories(body: dict[str, Any]) -> None:
    assert rules.check_responses(body) is None


def test_r1_function_call_without_output() -> None:
    body = mutate(RESPONSES_OK, "input", lambda i: i.pop())
    v = rules.check_responses(body)
    assert v == rules.Violation("R1", f"No tool output found for function call {C_B}.", "input")


def test_r2_output_with_wrong_call_id() -> None:
    body = mutate(RESPONSES_OK, "input", lambda i: i[5].update(call_id="call_wrong"))
    v = rules.check_responses(body)
    assert v is not None and v.rule == "R2" and v.param == "input" and v.code is None
    assert v.message == "No tool call found for function call output with call_id call_wrong."


def test_r2_output_before_its_call() -> None:
    body = mutate(RESPONSES_OK, "input", lambda i: i.insert(1, i.pop(4)))
    v = rules.check_responses(body)
    assert v is not None and v.rule == "R2"


def test_r4_duplicate_item_id() -> None:
    def dup(items: list[dict[str, Any]]) -> None:
        items[2]["id"] = items[3]["id"] = "fc_68d25eda79d481959bd7e424738091a006b9ae17d036a0e7"

    v = rules.check_responses(mutate(RESPONSES_OK, "input", dup))
    assert v is not None and v.rule == "R4"
    assert v.message == (
        "Duplicate item found with id fc_68d25eda79d481959bd7e424738091a006b9ae17d036a0e7. "
        "Remove duplicate items from your input and try again."
    )


def test_r5_call_id_used_as_item_id() -> None:
    v = rules.check_responses(mutate(RESPONSES_OK, "input", lambda i: i[2].update(id=C_A)))
    assert v is not None and v.rule == "R5"
    assert v.message == f"Invalid 'input[2].id': '{C_A}'. Expected an ID that begins with 'fc'."


def test_r3_reasoning_without_following_item() -> None:
    body = mutate(RESPONSES_REASONING, "input", lambda i: i.__delitem__(slice(2, 5)))
    v = rules.check_responses(body)
    assert v is not None and v.rule == "R3"
    assert v.message.endswith(
        "of type 'reasoning' was provided without its required following item."
    )


# -- Chat ----------------------------------------------------------------------------------


def test_chat_accepts_recorded_history_in_any_tool_order() -> None:
    assert rules.check_chat(CHAT_OK) is None
    swapped = mutate(CHAT_OK, "messages", lambda m: m.insert(3, m.pop(4)))
    assert rules.check_chat(swapped) is None


def test_c1_missing_tool_message_names_the_assistant_index() -> None:
    v = rules.check_chat(mutate(CHAT_OK, "messages", lambda m: m.pop()))
    assert v is not None and v.rule == "C1" and v.param == "messages.[2].role"
    assert v.message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to "
        f"each 'tool_call_id'. The following tool_call_ids did not have response messages: {T_B}"
    )


def test_c1_then_c2_when_a_user_message_splits_the_group() -> None:
    body = mutate(CHAT_OK, "messages", lambda m: m.insert(3, {"role": "user", "content": "x"}))
    v = rules.check_chat(body)
    assert v is not None and v.rule == "C1" and T_A in v.message and T_B in v.message


def test_c2_tool_message_without_tool_calls() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}, CHAT_OK["messages"][3]]}
    v = rules.check_chat(body)
    assert v == rules.Violation(
        "C2",
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.",
        "messages.[1].role",
    )


def test_c3_unknown_tool_call_id() -> None:
    body = mutate(CHAT_OK, "messages", lambda m: m[4].update(tool_call_id="call_XXXXXXXXX"))
    v = rules.check_chat(body)
    assert v is not None and v.rule == "C3"
    assert v.message == (
        "Invalid parameter: 'tool_call_id' of 'call_XXXXXXXXX' not found in 'tool_calls' of "
        "previous message."
    )


# -- Anthropic -----------------------------------------------------------------------------


def test_anthropic_accepts_recorded_history() -> None:
    assert rules.check_anthropic(ANTHROPIC_OK) is None
    trailing_text = mutate(
        ANTHROPIC_OK,
        "messages",
        lambda m: m[2]["content"].append({"type": "text", "text": "Here are the results."}),
    )
    assert rules.check_anthropic(trailing_text) is None


def test_a2_recorded_request_gets_recorded_message() -> None:
    v = rules.check_anthropic(ANTHROPIC_A2_RECORDED)
    assert v is not None and v.rule == "A2"
    assert v.message == (  # error-400-unexpected-tool-use-id.json
        "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_01GHndag5wQmbzNihYmV2UBj. Each `tool_result` block must have a corresponding "
        "`tool_use` block in the previous message."
    )


def test_wrong_tool_use_id_reports_the_unanswered_call_first() -> None:
    """Message order decides: the assistant turn (A1) is checked before its answer (A2)."""
    body = mutate(
        ANTHROPIC_OK, "messages", lambda m: m[2]["content"][1].update(tool_use_id="toolu_01Wrong")
    )
    v = rules.check_anthropic(body)
    assert (
        v is not None
        and v.rule == "A1"
        and v.message.endswith(
            f"immediately after: {U2}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."
        )
    )
    extra = mutate(
        ANTHROPIC_OK,
        "messages",
        lambda m: m[2]["content"].append(
            {"type": "tool_result", "tool_use_id": "toolu_01Wrong", "content": "?"}
        ),
    )
    v = rules.check_anthropic(extra)
    assert v is not None and v.rule == "A2"
    assert v.message.startswith(
        "messages.2.content.2: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_01Wrong."
    )


def test_a1_tool_use_without_result_lists_ids() -> None:
    body = mutate(
        ANTHROPIC_OK, "messages", lambda m: m.__setitem__(2, {"role": "user", "content": "go on"})
    )
    v = rules.check_anthropic(body)
    assert v is not None and v.rule == "A1"
    assert v.message == (
        f"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{U1}, {U2}. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )


def test_a4_text_before_tool_result_is_rejected() -> None:
    body = mutate(
        ANTHROPIC_OK,
        "messages",
        lambda m: m[2]["content"].insert(0, {"type": "text", "text": "Here are the results:"}),
    )
    v = rules.check_anthropic(body)
    assert v is not None and v.rule == "A4" and v.message.startswith("messages.2.content.0: ")


def test_a3_duplicate_tool_use_ids() -> None:
    def dup(m: list[dict[str, Any]]) -> None:
        m[1]["content"][2]["id"] = U1
        m[2]["content"].pop()

    v = rules.check_anthropic(mutate(ANTHROPIC_OK, "messages", dup))
    assert v == rules.Violation("A3", "messages.1.content.2: tool_use ids must be unique")


def test_a5_tool_use_id_pattern_and_a6_unique_tool_names() -> None:
    bad_id = mutate(ANTHROPIC_OK, "messages", lambda m: m[1]["content"][1].update(id="call.1"))
    v = rules.check_anthropic(bad_id)
    assert v == rules.Violation(
        "A5", "messages.1.content.1.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    )
    dup_tools = mutate(ANTHROPIC_OK, "tools", lambda t: t.append(dict(t[0])))
    assert rules.check_anthropic(dup_tools) == rules.Violation(
        "A6", "tools: Tool names must be unique."
    )


# -- conversation summary, step choice, rendering helpers ----------------------------------


def test_conversation_summaries_agree_across_protocols() -> None:
    r = history.from_responses(RESPONSES_OK)  # the empty assistant message joins the calls
    assert r.assistant_turns == 1 and [x.name for x in r.results] == ["get_location"] * 2
    c = history.from_chat(CHAT_OK)
    assert c.assistant_turns == 1 and [x.content for x in c.results] == ["true", "Success"]
    a = history.from_anthropic(ANTHROPIC_OK)
    assert a.assistant_turns == 1 and a.results_named("retrieve_entity_info")[1].content == (
        "bob is alice's husband"
    )


SCENARIO = Scenario.model_validate(
    {
        "steps": [
            {"name": "ask", "tool_calls": [{"name": "get_location", "arguments": {"q": "{user}"}}]},
            {
                "name": "answer",
                "when": {"results_for": ["get_location"]},
                "text": "first={result:get_location#1} last={result:get_location} "
                "none={result:nope}",
            },
        ]
    }
)


def test_step_choice_and_result_substitution() -> None:
    fresh = history.from_responses({"input": "Where is London?"})
    assert select_step(SCENARIO, fresh) == 0
    turn = build_turn(SCENARIO.steps[0], fresh, [], None)
    assert orjson.loads(turn.calls[0].arguments) == {"q": "Where is London?"}
    conv = history.from_responses(RESPONSES_OK)
    assert select_step(SCENARIO, conv) == 1
    text = substitute(SCENARIO.steps[1].text, conv)
    assert text == 'first=Wrong location last={"lat": 51, "lng": 0} none=<no result for nope>'
    no_results = history.Conversation(1, (), "")
    assert select_step(SCENARIO, no_results) is None


def test_one_char_fragments_never_split_a_character() -> None:
    args = orjson.dumps({"city": "Zürich → 東京 🚆"}).decode()
    frags = arg_fragments(args, one_char=True)
    assert "".join(frags) == args and all(len(f) == 1 for f in frags)
    assert all(f.encode("utf-8").decode("utf-8") == f for f in frags)


def test_truncate_cuts_the_last_call_mid_arguments() -> None:
    from callgate.standins.scripted.scenario import Fault

    conv = history.from_responses({"input": "x"})
    turn = build_turn(SCENARIO.steps[0], conv, [Fault(type="truncate")], None)
    assert turn.stop == "max_tokens" and not turn.calls[-1].complete
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(turn.calls[-1].arguments)
