"""Property-style checks with seeded random inputs (no hypothesis): round trips, no exceptions
on any text, no effects outside the return value."""

import copy
import random
from typing import Any

import pytest

from agentroll.handlers.toolcalls import (
    HermesParser,
    Llama3JsonParser,
    ParsedReply,
    Qwen3CoderParser,
    ToolCall,
    get_parser,
)

SEEDS = range(40)
# Characters that stress escaping: quotes, backslashes, markup-ish brackets, unicode, controls.
TRICKY = "abcXYZ019 _-.,:;!?\"'\\/{}[]<>=&\n\t\r 中文é🚀\u2028\x00"
PROSE = "abcdefghij KLMNOP 0123456789 .,:!?'-()é中🚀"
TYPE_OF = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}


def rand_string(rng: random.Random, alphabet: str = TRICKY, max_len: int = 12) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len)))


def rand_name(rng: random.Random) -> str:
    first = rng.choice("abcdefghijklmnopqrstuvwxyz_")
    return first + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "float", "bool", "none"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return rand_string(rng)
    if kind == "int":
        return rng.randint(-(10**12), 10**12)
    if kind == "float":
        return rng.uniform(-1e6, 1e6)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rand_string(rng): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def rand_calls(rng: random.Random, top_string_prefix: str = "") -> list[ToolCall]:
    calls = []
    for i in range(rng.randint(1, 4)):
        args = {}
        for _ in range(rng.randint(0, 4)):
            value = rand_value(rng)
            if isinstance(value, str):
                value = top_string_prefix + value
            args[rand_name(rng)] = value
        calls.append(ToolCall(rand_name(rng), args, f"call_{i}"))
    return calls


def prose(rng: random.Random) -> str:
    return rand_string(rng, PROSE, 30).strip()


def expected_content(before: str, after: str) -> str:
    return "\n".join(p for p in (before, after) if p)


def schema_for(calls: list[ToolCall]) -> list[dict[str, Any]]:
    tools = []
    for call in calls:
        props = {}
        for key, value in call.arguments.items():
            json_type = "null" if value is None else TYPE_OF.get(type(value), "object")
            props[key] = {"type": json_type}
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": call.name,
                    "parameters": {"type": "object", "properties": props},
                },
            }
        )
    return tools


@pytest.mark.parametrize("parser", [HermesParser(), Llama3JsonParser()], ids=lambda p: p.name)
@pytest.mark.parametrize("seed", SEEDS)
def test_json_formats_round_trip(parser: HermesParser | Llama3JsonParser, seed: int) -> None:
    rng = random.Random(seed)
    calls = rand_calls(rng)
    before, after = prose(rng), prose(rng)
    text = f"{before}\n{parser.render(calls)}\n{after}"
    assert parser.parse(text) == ParsedReply(expected_content(before, after), tuple(calls), ())


@pytest.mark.parametrize("seed", SEEDS)
def test_qwen3_coder_round_trip_without_schemas(seed: int) -> None:
    rng = random.Random(seed)
    # Without schemas a top-level string that is valid JSON would be decoded; "s..." never is.
    calls = rand_calls(rng, top_string_prefix="s")
    calls = [c for c in calls if "</parameter>" not in str(c.arguments)]
    before, after = prose(rng), prose(rng)
    parser = Qwen3CoderParser()
    text = f"{before}\n{parser.render(calls)}\n{after}"
    assert parser.parse(text) == ParsedReply(expected_content(before, after), tuple(calls), ())


@pytest.mark.parametrize("seed", SEEDS)
def test_qwen3_coder_round_trip_with_schemas(seed: int) -> None:
    rng = random.Random(seed)
    calls = rand_calls(rng)
    # JSON-looking strings must stay strings when the schema says "string".
    calls.append(ToolCall("typed", {"a": "123", "b": "null", "c": '{"x": 1}', "d": " 7 "}, "x"))
    calls = [replace_id(c, i) for i, c in enumerate(calls)]
    parser = Qwen3CoderParser().with_tools(schema_for(calls))
    text = Qwen3CoderParser().render(calls)
    reply = parser.parse(text)
    assert reply.errors == ()
    assert reply.calls == tuple(calls)


def replace_id(call: ToolCall, i: int) -> ToolCall:
    return ToolCall(call.name, call.arguments, f"call_{i}")


def mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(["delete", "insert", "duplicate", "swap"])
        if not chars:
            chars = list(rand_string(rng))
            continue
        i = rng.randrange(len(chars))
        if op == "delete":
            del chars[i : i + rng.randint(1, 5)]
        elif op == "insert":
            chars[i:i] = list(rng.choice(FRAGMENTS))
        elif op == "duplicate":
            j = min(len(chars), i + rng.randint(1, 20))
            chars[i:i] = chars[i:j]
        else:
            chars[i] = rng.choice(TRICKY)
    return "".join(chars)


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<|python_tag|>",
    '{"name": ',
    '"arguments": ',
    "{",
    "}",
    "[",
    "]",
    ";",
    '"',
    "\\",
    ">",
    "\n",
    "NaN",
    "1" * 5000,
]
PARSERS = [HermesParser(), Qwen3CoderParser(), Llama3JsonParser()]


def check_shape(reply: ParsedReply) -> None:
    assert isinstance(reply, ParsedReply)
    assert isinstance(reply.content, str)
    assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in reply.calls)
    assert [c.id for c in reply.calls] == [f"call_{i}" for i in range(len(reply.calls))]
    assert all(
        isinstance(e, str) and e.startswith(("tool call ", "parameter ")) for e in reply.errors
    )


@pytest.mark.parametrize("seed", range(150))
def test_mangled_replies_never_raise(seed: int) -> None:
    rng = random.Random(seed)
    source = rng.choice(PARSERS)
    text = source.render(rand_calls(rng))
    text = f"{prose(rng)}\n{text}"
    for parser in PARSERS:
        for _ in range(4):
            check_shape(parser.parse(mutate(rng, text)))
        # Every prefix-cut (a length limit hit mid-call) is handled too.
        for cut in sorted(rng.sample(range(len(text) + 1), min(10, len(text) + 1))):
            check_shape(parser.parse(text[:cut]))


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.name)
def test_random_garbage_never_raises(parser: Any) -> None:
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS + list(TRICKY)) for _ in range(rng.randint(0, 40)))
        check_shape(parser.parse(text))


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.name)
def test_parsing_changes_nothing_outside_its_result(parser: Any) -> None:
    rng = random.Random(3)
    calls = rand_calls(rng, top_string_prefix="s")
    tools = schema_for(calls)
    tools_before = copy.deepcopy(tools)
    typed = get_parser(parser.name, tools=tools)
    state_before = copy.deepcopy(vars(typed))
    text = "Intro\n" + parser.render(calls)
    first = typed.parse(text)
    assert first.calls  # the check is meaningful only if something was parsed
    for call in first.calls:  # a caller that edits its result ...
        call.arguments.clear()
        call.arguments["injected"] = True
    second = typed.parse(text)  # ... affects neither the parser nor later results
    assert [c.arguments for c in second.calls] == [c.arguments for c in calls]
    assert tools == tools_before
    assert vars(typed) == state_before
    assert text == "Intro\n" + parser.render(calls)
