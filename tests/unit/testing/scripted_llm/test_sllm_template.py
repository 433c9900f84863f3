"""ChatML rendering (Qwen2.5 style) and its inverse."""

import json

import pytest

from agentroll.testing.scripted_llm import get_chat_template, get_tokenizer, parse_chatml

TOOLS = [
    {
        "type": "function",
        "function": {"name": "calc", "description": "Evaluate", "parameters": {"type": "object"}},
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+3?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "calc", "arguments": '{"expr": "2+3"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "5"},
    {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    {"role": "assistant", "content": "It is 5."},
]


def test_plain_chat_with_generation_prompt() -> None:
    text = get_chat_template().render(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_tools_tool_calls_and_grouped_tool_responses() -> None:
    text = get_chat_template().render(CONVERSATION, TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}'
        "\n</tool_call><|im_end|>\n"
    ) in text
    # consecutive tool results share one user turn
    assert (
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\nok\n"
        "</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\nIt is 5.<|im_end|>\n")
    assert text.count("<|im_start|>") == text.count("<|im_end|>") == 5


def test_dict_arguments_and_content_parts() -> None:
    text = get_chat_template().render(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": "Sure.",
                "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls"}}}],
            },
        ]
    )
    assert "<|im_start|>user\nab<|im_end|>" in text
    call = '{"name": "bash", "arguments": {"command": "ls"}}'
    assert f"Sure.\n<tool_call>\n{call}\n</tool_call>" in text


def test_continue_final_message_leaves_the_turn_open() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    text = get_chat_template().render(messages, continue_final_message=True)
    assert text.endswith("<|im_start|>assistant\nHel")
    with pytest.raises(ValueError, match="Cannot set both"):
        get_chat_template().render(
            messages, add_generation_prompt=True, continue_final_message=True
        )


def test_encode_parses_special_tokens_from_the_text() -> None:
    tok = get_tokenizer()
    ids = get_chat_template().encode(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert ids[0] == tok.im_start_id
    assert ids.count(tok.eos_token_id) == 1
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_parse_chatml_inverts_render() -> None:
    text = get_chat_template().render(CONVERSATION, TOOLS, add_generation_prompt=True)
    messages = parse_chatml(text)
    assert [m.role for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "assistant",
    ]
    assert messages[2].tool_calls == [{"name": "calc", "arguments": {"expr": "2+3"}}]
    assert [messages[3].content, messages[4].content] == ["5", "ok"]
    assert messages[-1].content == "" and not messages[-1].complete
