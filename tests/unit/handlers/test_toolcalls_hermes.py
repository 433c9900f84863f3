"""Hermes / Qwen2.5 `<tool_call>{json}</tool_call>` parsing."""

import pytest

from agentroll.handlers.toolcalls import HermesParser, ToolCall

P = HermesParser()


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def test_single_call_without_prose() -> None:
    reply = P.parse(call("get_weather", '{"city": "Paris", "unit": "celsius"}'))
    assert reply.content == ""
    assert reply.calls == (
        ToolCall(name="get_weather", arguments={"city": "Paris", "unit": "celsius"}, id="call_0"),
    )
    assert reply.errors == ()
    assert reply.ok


def test_multiple_calls_in_order_with_surrounding_content() -> None:
    text = (
        "Let me check both.\n"
        + call("ls", '{"path": "/tmp"}')
        + "\n"
        + call("cat", '{"path": "/etc/hosts"}')
        + "\nThen I will answer."
    )
    reply = P.parse(text)
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("call_0", "ls", {"path": "/tmp"}),
        ("call_1", "cat", {"path": "/etc/hosts"}),
    ]
    assert reply.content == "Let me check both.\nThen I will answer."


def test_nested_json_and_unicode_arguments() -> None:
    args = '{"query": {"filters": [{"k": "città", "v": [1, 2.5, null, true]}]}, "emoji": "🚀"}'
    reply = P.parse("Voilà " + call("search", args))
    assert reply.calls[0].arguments == {
        "query": {"filters": [{"k": "città", "v": [1, 2.5, None, True]}]},
        "emoji": "🚀",
    }
    assert reply.content == "Voilà"


def test_markup_inside_json_strings_is_just_text() -> None:
    args = '{"code": "print(\\"<think>\\")  # <tool_call> </think>"}'
    reply = P.parse("<think>ok</think>" + call("python", args))
    assert reply.calls[0].arguments == {"code": 'print("<think>")  # <tool_call> </think>'}


def test_raw_newlines_in_strings_are_accepted() -> None:
    reply = P.parse(
        '<tool_call>{"name": "python", "arguments": {"code": "a = 1\nprint(a)"}}</tool_call>'
    )
    assert reply.calls[0].arguments == {"code": "a = 1\nprint(a)"}


def test_lenient_argument_spellings() -> None:
    reply = P.parse(
        '<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>'
        '<tool_call>{"name": "b"}</tool_call>'
        '<tool_call>{"name": "c", "arguments": "{\\"y\\": 2}"}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in reply.calls] == [
        ("a", {"x": 1}),
        ("b", {}),
        ("c", {"y": 2}),
    ]


def test_calls_inside_reasoning_are_not_parsed() -> None:
    text = "<think>maybe " + call("rm", '{"path": "/"}') + "? no.</think>\n" + call("ls", "{}")
    reply = P.parse(text)
    assert [c.name for c in reply.calls] == ["ls"]
    assert reply.content.startswith("<think>maybe <tool_call>")  # reasoning kept verbatim


def test_reply_that_starts_mid_reasoning() -> None:
    # Qwen3 thinking templates put "<think>" in the prompt: the reply only closes it.
    text = "plan: " + call("rm", "{}") + "</think>\n" + call("ls", "{}")
    assert [c.name for c in P.parse(text).calls] == ["ls"]


def test_unterminated_reasoning_hides_everything_after_it() -> None:
    reply = P.parse("<think>I could " + call("ls", "{}"))
    assert reply.calls == () and reply.errors == ()


def test_last_call_missing_close_tag_is_accepted_when_complete() -> None:
    # A stop string at "</tool_call>" removes the tag from the text.
    reply = P.parse('ok\n<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n')
    assert reply.calls[0].arguments == {"path": "."}
    assert reply.content == "ok"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b", "arguments": {"x": 1,}}'
            "</tool_call>",
            "tool call 2 is not valid JSON: Expecting property name enclosed in double quotes "
            "at char 35",
        ),
        ("<tool_call>\n</tool_call>", "tool call 1 is empty"),
        ('<tool_call>["ls"]</tool_call>', "tool call 1 must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'tool call 1 has no "name" string'),
        ('<tool_call>{"name": 3}</tool_call>', 'tool call 1 has no "name" string'),
        (
            '<tool_call>{"name": "ls", "arguments": [1]}</tool_call>',
            'tool call 1 (ls): "arguments" must be a JSON object, got an array',
        ),
        (
            '<tool_call>{"name": "ls", "arguments": "a,b"}</tool_call>',
            'tool call 1 (ls): "arguments" must be a JSON object, got a string',
        ),
        (
            '<tool_call>{"name": "ls", "arguments": {"x": NaN}}</tool_call>',
            "tool call 1 is not valid JSON: NaN is not allowed in JSON",
        ),
        ('<tool_call>{"name": "ls", "argu', "tool call 1 is not closed with </tool_call>"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "tool call 1 is not valid JSON"),
    ],
)
def test_malformed_calls_become_readable_errors(text: str, expected: str) -> None:
    reply = P.parse(text)
    assert len(reply.errors) == 1
    assert reply.errors[0].startswith(expected), reply.errors[0]
    assert not reply.ok


def test_error_quotes_the_text_near_the_problem() -> None:
    reply = P.parse('<tool_call>{"name": "x" "arguments": {}}</tool_call>')
    assert reply.errors == (
        "tool call 1 is not valid JSON: Expecting ',' delimiter at char 13 "
        """(near '{"name": "x" "arguments": {}}')""",
    )


def test_bad_call_does_not_hide_good_ones_and_ids_count_good_calls() -> None:
    text = call("a", "{}") + '<tool_call>{"name": oops}</tool_call>' + call("b", "{}")
    reply = P.parse(text)
    assert [(c.id, c.name) for c in reply.calls] == [("call_0", "a"), ("call_1", "b")]
    assert reply.errors[0].startswith("tool call 2 is not valid JSON")
    assert reply.content == ""  # malformed markup leaves the content too


def test_unclosed_call_swallows_up_to_the_next_close_tag() -> None:
    # The first </tool_call> closes the call, so the broken one absorbs the next: one error.
    reply = P.parse('<tool_call>{"name": "a", \n' + call("b", '{"x": 1}') + call("c", "{}"))
    assert [c.name for c in reply.calls] == ["c"]
    assert len(reply.errors) == 1
    assert reply.errors[0].startswith("tool call 1 is not valid JSON")


def test_text_without_calls_is_all_content() -> None:
    text = 'Use {"name": "x"} in JSON, and <tool_call> tags end with </tool_call>? No.'
    reply = P.parse("The answer is 42.")
    assert reply.content == "The answer is 42." and reply.calls == () and reply.ok
    assert P.parse("").content == ""
    assert P.parse(text).errors  # a stray opening tag is reported, not ignored


def test_render_produces_the_documented_markup() -> None:
    text = P.render([ToolCall("ls", {"path": "é"}, "call_0")])
    assert text == '<tool_call>\n{"name": "ls", "arguments": {"path": "é"}}\n</tool_call>'
