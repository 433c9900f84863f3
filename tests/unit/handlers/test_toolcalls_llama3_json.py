"""Llama 3 JSON `{"name": ..., "parameters": {...}}` parsing."""

import pytest

from agentroll.handlers.toolcalls import Llama3JsonParser, ToolCall

P = Llama3JsonParser()


def test_single_call_with_and_without_python_tag() -> None:
    plain = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    expected = (ToolCall("get_weather", {"city": "Paris"}, "call_0"),)
    assert P.parse(plain).calls == expected
    tagged = P.parse("<|python_tag|>" + plain)
    assert tagged.calls == expected and tagged.content == "" and tagged.ok


def test_semicolon_separated_calls_in_order() -> None:
    text = (
        '{"name": "a", "parameters": {"x": 1}}; '
        '{"name": "b", "arguments": {"y": [2]}};{"name": "c"}'
    )
    reply = P.parse(text)
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("call_0", "a", {"x": 1}),
        ("call_1", "b", {"y": [2]}),
        ("call_2", "c", {}),
    ]


def test_prose_around_calls_and_plain_json_stay_content() -> None:
    text = (
        'The config is {"debug": true}.\nCalling now:\n'
        '{"name": "search", "parameters": {"q": "naïve 🚀", "opts": {"k": [1, {"d": null}]}}}'
        "\nDone."
    )
    reply = P.parse(text)
    assert reply.calls[0].arguments == {"q": "naïve 🚀", "opts": {"k": [1, {"d": None}]}}
    assert reply.content == 'The config is {"debug": true}.\nCalling now:\nDone.'


def test_json_without_name_is_content_not_a_call() -> None:
    reply = P.parse('{"type": "object", "properties": {}}')
    assert reply.calls == () and reply.ok
    assert reply.content == '{"type": "object", "properties": {}}'


def test_type_function_wrapper_is_accepted() -> None:
    reply = P.parse('{"type": "function", "name": "ls", "parameters": {"path": "/"}}')
    assert reply.calls[0].name == "ls" and reply.calls[0].arguments == {"path": "/"}


def test_calls_inside_reasoning_are_not_parsed() -> None:
    reply = P.parse(
        '<think>{"name": "rm", "parameters": {}}</think>{"name": "ls", "parameters": {}}'
    )
    assert [c.name for c in reply.calls] == ["ls"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"name": "ls", "parameters": {"path": "/",}}',
            "tool call 1 is not valid JSON: Expecting property name enclosed in double quotes",
        ),
        (
            '<|python_tag|>brave_search.call(query="x")',
            "tool call 1 after <|python_tag|> is not a JSON object",
        ),
        ("<|python_tag|>", "tool call 1 after <|python_tag|> is not a JSON object"),
        ('<|python_tag|>{"query": "x"}', 'tool call 1 has no "name" string'),
        (
            '{"name": "ls", "parameters": ["/"]}',
            'tool call 1 (ls): "parameters" must be a JSON object, got an array',
        ),
        ('{"name": "ls", "parameters": {"path": "/"}', "tool call 1 is not valid JSON"),
    ],
)
def test_malformed_calls_become_readable_errors(text: str, expected: str) -> None:
    reply = P.parse(text)
    assert len(reply.errors) == 1, reply.errors
    assert reply.errors[0].startswith(expected), reply.errors[0]
    assert reply.calls == ()


def test_broken_call_does_not_hide_the_next_one() -> None:
    text = '{"name": "a", "parameters": {,}}\n{"name": "b", "parameters": {"x": 1}}'
    reply = P.parse(text)
    assert [(c.id, c.name) for c in reply.calls] == [("call_0", "b")]
    assert reply.errors[0].startswith("tool call 1 is not valid JSON")


def test_render_round_trip_shape() -> None:
    calls = [ToolCall("a", {"x": "é"}, "call_0"), ToolCall("b", {}, "call_1")]
    text = P.render(calls)
    assert text == '{"name": "a", "parameters": {"x": "é"}}; {"name": "b", "parameters": {}}'
    assert P.parse(text).calls == tuple(calls)


def test_degenerate_nesting_is_one_error() -> None:
    # A repetition loop nests thousands of unclosed calls: one error, not one per level.
    reply = P.parse('{"name": "a", "parameters": {"x": ' * 3000)
    assert reply.errors == ("tool call 1 is not valid JSON: it is nested too deeply",)


def test_objects_nested_in_a_broken_call_are_not_calls() -> None:
    text = '{"name": "outer", "parameters": {"inner": {"name": "x", "parameters": {}}, ,}}'
    reply = P.parse(text)
    assert reply.calls == ()
    assert len(reply.errors) == 1 and reply.errors[0].startswith("tool call 1 is not valid JSON")
