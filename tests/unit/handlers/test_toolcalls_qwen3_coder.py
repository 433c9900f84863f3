"""Qwen3-Coder XML-style `<function=..><parameter=..>` parsing."""

import pytest

from agentroll.handlers.toolcalls import Qwen3CoderParser, ToolCall

P = Qwen3CoderParser()

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "integer"},
                    "append": {"type": "boolean"},
                    "ratio": {"type": "number"},
                    "tags": {"type": "array"},
                    "meta": {"type": ["object", "null"]},
                },
            },
        },
    },
    {"name": "bare", "parameters": {"properties": {"n": {"type": "integer"}}}},
]


def block(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_single_call_values_decoded_when_json() -> None:
    reply = P.parse(block("run", cmd="ls -la /tmp", n="5", opts='{"a": [1, 2]}', flag="true"))
    assert reply.calls == (
        ToolCall(
            name="run",
            arguments={"cmd": "ls -la /tmp", "n": 5, "opts": {"a": [1, 2]}, "flag": True},
            id="call_0",
        ),
    )
    assert reply.content == "" and reply.ok


def test_multiline_values_keep_inner_newlines_and_indentation() -> None:
    code = "def f():\n    return '<tag>'\n\n"
    reply = P.parse(block("write", content=code))
    assert reply.calls[0].arguments == {"content": code}


def test_multiple_calls_content_and_unicode() -> None:
    text = (
        "Je regarde 👀\n"
        + block("ls", path="/données")
        + "\n"
        + block("cat", path="ä.txt")
        + "\nfin"
    )
    reply = P.parse(text)
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("call_0", "ls", {"path": "/données"}),
        ("call_1", "cat", {"path": "ä.txt"}),
    ]
    assert reply.content == "Je regarde 👀\nfin"


def test_no_parameters_means_empty_arguments() -> None:
    reply = P.parse("<tool_call>\n<function=list_files>\n</function>\n</tool_call>")
    assert reply.calls[0].name == "list_files" and reply.calls[0].arguments == {}


def test_schema_keeps_strings_verbatim_and_checks_types() -> None:
    typed = Qwen3CoderParser(TOOLS)
    text = block(
        "write_file",
        path="123",
        content="null",
        mode="420",
        append="True",
        ratio="2",
        tags='["a"]',
        meta="null",
    ) + block("bare", n="7.0")
    reply = typed.parse(text)
    assert reply.ok, reply.errors
    assert reply.calls[0].arguments == {
        "path": "123",
        "content": "null",
        "mode": 420,
        "append": True,
        "ratio": 2,
        "tags": ["a"],
        "meta": None,
    }
    assert reply.calls[1].arguments == {"n": 7}
    # Without schemas the same JSON-looking strings are decoded.
    assert P.parse(block("write_file", path="123")).calls[0].arguments == {"path": 123}


def test_schema_type_mismatch_is_an_actionable_error() -> None:
    typed = Qwen3CoderParser(TOOLS)
    reply = typed.parse(block("write_file", path="a", mode="rw-r--r--"))
    assert reply.calls == ()
    assert reply.errors == (
        "parameter 'mode' of tool call 1 (write_file) must be an integer, got 'rw-r--r--'",
    )
    reply = typed.parse(block("write_file", meta="[1]"))
    assert reply.errors == (
        "parameter 'meta' of tool call 1 (write_file) must be null or a JSON object, got '[1]'",
    )


def test_unknown_tools_and_params_fall_back_to_json_or_text() -> None:
    typed = Qwen3CoderParser(TOOLS)
    reply = typed.parse(block("other", x="[1]", y="plain text"))
    assert reply.calls[0].arguments == {"x": [1], "y": "plain text"}


def test_with_tools_returns_a_new_parser() -> None:
    typed = P.with_tools(TOOLS)
    assert isinstance(typed, Qwen3CoderParser) and typed is not P
    assert P.parse(block("write_file", path="1")).calls[0].arguments == {"path": 1}


def test_bare_function_block_and_missing_closers_at_the_end() -> None:
    reply = P.parse("Doing it.\n<function=ls>\n<parameter=path>\n/\n</parameter>\n</function>")
    assert reply.calls[0].arguments == {"path": "/"} and reply.content == "Doing it."
    # Stop strings can eat the closing tags.
    reply = P.parse("<tool_call>\n<function=ls>\n<parameter=path>\n/\n</parameter>\n")
    assert reply.calls[0].arguments == {"path": "/"} and reply.ok


def test_two_functions_in_one_block_without_function_close() -> None:
    text = "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n<function=b>\n</tool_call>"
    reply = P.parse(text)
    assert [(c.name, c.arguments) for c in reply.calls] == [("a", {"x": 1}), ("b", {})]


def test_hermes_json_inside_the_block_is_accepted() -> None:
    reply = P.parse('<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}\n</tool_call>')
    assert reply.calls[0].arguments == {"path": "/"}


def test_markup_like_text_inside_values_and_reasoning() -> None:
    value = "see <function=evil> and <tool_call> here"
    reply = P.parse("<think>" + block("rm", path="/") + "</think>" + block("echo", text=value))
    assert [(c.name, c.arguments) for c in reply.calls] == [("echo", {"text": value})]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</function>\n</tool_call>",
            "parameter 'path' of tool call 1 (ls) is not closed with </parameter>",
        ),
        (
            "<tool_call>\nls /tmp\n</tool_call>",
            "tool call 1 has no <function=TOOL_NAME> line",
        ),
        (
            "<tool_call>\n<function=>\n</function>\n</tool_call>",
            "tool call 1 has an empty name in <function=...>",
        ),
        (
            block("ls", path="a") + block("ls", path="a", **{"path ": "b"}),
            "tool call 2 (ls) gives parameter 'path' twice",
        ),
        ("<function=ls\n<parameter=p>\n1\n</parameter>", "tool call 1 has no <function="),
        (
            '<tool_call>{"name": "ls", "arguments": {,}}</tool_call>',
            "tool call 1 is not valid JSON",
        ),
    ],
)
def test_malformed_calls_become_readable_errors(text: str, expected: str) -> None:
    reply = P.parse(text)
    assert len(reply.errors) == 1, reply.errors
    assert reply.errors[0].startswith(expected), reply.errors[0]


def test_render_produces_the_documented_markup() -> None:
    text = P.render([ToolCall("ls", {"path": "/", "n": 2}, "call_0")])
    assert text == (
        "<tool_call>\n<function=ls>\n<parameter=path>\n/\n</parameter>\n"
        "<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>"
    )
