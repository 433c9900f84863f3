"""Finding tool-call parsers by name."""

import pytest

from agentroll.handlers import RegistryError
from agentroll.handlers.toolcalls import (
    DEFAULT_PARSER,
    DuplicateParserError,
    HermesParser,
    Llama3JsonParser,
    ParsedReply,
    ParserRegistry,
    Qwen3CoderParser,
    ToolCallParser,
    UnknownParserError,
    get_parser,
    parser_names,
    register_parser,
)


class ShoutParser:
    """A third-party parser (it only upper-cases the reply)."""

    name = "shout"

    def parse(self, text: str) -> ParsedReply:
        return ParsedReply(content=text.upper())


def test_builtins_resolve_to_shared_instances() -> None:
    registry = ParserRegistry()
    assert registry.names() == ["hermes", "llama3_json", "qwen3_coder"]
    assert isinstance(registry.get("hermes"), HermesParser)
    assert isinstance(registry.get("qwen3_coder"), Qwen3CoderParser)
    assert isinstance(registry.get("llama3_json"), Llama3JsonParser)
    assert registry.get("hermes") is registry.get("hermes")
    assert DEFAULT_PARSER == "hermes" and isinstance(registry.get(), HermesParser)


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownParserError) as info:
        ParserRegistry().get("mistral")
    assert str(info.value) == (
        "unknown tool-call parser 'mistral'; known parsers: hermes, llama3_json, qwen3_coder"
    )
    assert isinstance(info.value, KeyError) and isinstance(info.value, RegistryError)


def test_explicit_registration_and_duplicates() -> None:
    registry = ParserRegistry()
    parser = ShoutParser()
    registry.register(parser)
    assert registry.get("shout") is parser
    assert "shout" in registry.names()
    with pytest.raises(DuplicateParserError, match="'shout' is already registered"):
        registry.register(ShoutParser())
    with pytest.raises(DuplicateParserError, match="'hermes' is already registered"):
        registry.register(ShoutParser(), name="hermes")
    registry.register(ShoutParser(), name="shout2")  # another name is fine
    assert registry.get("shout2").parse("a").content == "A"


def test_registering_something_that_is_not_a_parser_fails() -> None:
    with pytest.raises(RegistryError, match="is not a tool-call parser"):
        ParserRegistry().register(object())  # type: ignore[arg-type]


def test_module_attr_paths_for_classes_and_instances() -> None:
    registry = ParserRegistry()
    by_class = registry.get("agentroll.handlers.toolcalls.hermes:HermesParser")
    assert isinstance(by_class, HermesParser)
    by_instance = registry.get(f"{__name__}:SHOUT")
    assert by_instance is SHOUT
    with pytest.raises(RegistryError, match="cannot import 'no_such_module_xyz'"):
        registry.get("no_such_module_xyz:Parser")
    with pytest.raises(RegistryError, match="has no attribute 'Nope'"):
        registry.get("agentroll.handlers.toolcalls.hermes:Nope")
    with pytest.raises(RegistryError, match="is not a tool-call parser"):
        registry.get("agentroll.handlers.toolcalls.hermes:OPEN")


SHOUT = ShoutParser()


def test_tools_give_schema_aware_parsers_and_are_ignored_by_others() -> None:
    registry = ParserRegistry()
    tools = [{"name": "f", "parameters": {"properties": {"s": {"type": "string"}}}}]
    typed = registry.get("qwen3_coder", tools=tools)
    assert typed is not registry.get("qwen3_coder")
    text = "<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n</function>\n</tool_call>"
    assert typed.parse(text).calls[0].arguments == {"s": "42"}
    assert registry.get("qwen3_coder").parse(text).calls[0].arguments == {"s": 42}
    assert registry.get("hermes", tools=tools) is registry.get("hermes")


def test_process_wide_functions() -> None:
    assert isinstance(get_parser(), HermesParser)
    assert isinstance(get_parser("llama3_json"), ToolCallParser)
    register_parser(ShoutParser(), name="test_toolcalls_registry_shout")
    assert get_parser("test_toolcalls_registry_shout").parse("x").content == "X"
    assert "test_toolcalls_registry_shout" in parser_names()
    with pytest.raises(DuplicateParserError):
        register_parser(ShoutParser(), name="test_toolcalls_registry_shout")
