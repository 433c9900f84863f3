import pytest

from agentroll.handlers import (
    AgentHandler,
    DuplicateHandlerError,
    HandlerRegistry,
    RegistryError,
    Reward,
    RolloutContext,
    UnknownHandlerError,
)
from agentroll.handlers.builtin.math import MathHandler


class Sample(AgentHandler):
    name = "sample"

    async def run(self, ctx: RolloutContext) -> None:
        return None

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0)


def test_builtin_math_is_known_and_shared() -> None:
    registry = HandlerRegistry()
    assert "math" in registry.names()
    handler = registry.get("math")
    assert isinstance(handler, MathHandler)
    assert registry.get("math") is handler  # one instance per name


def test_explicit_registration_and_duplicates() -> None:
    registry = HandlerRegistry()
    registry.register(Sample)
    assert isinstance(registry.get("sample"), Sample)
    with pytest.raises(DuplicateHandlerError, match="already registered"):
        registry.register(Sample)
    with pytest.raises(DuplicateHandlerError, match="'math'"):
        registry.register(Sample, name="math")


def test_entry_point_handler_from_separately_installed_package() -> None:
    # tests/fixtures/external_handler_pkg is pip-installed by the set-up; only its entry
    # point (group agentroll.handlers) tells agentroll about it.
    registry = HandlerRegistry()
    assert "echo" in registry.names()
    handler = registry.get("echo")
    assert type(handler).__module__ == "agentroll_example_handler"


def test_module_class_path() -> None:
    handler = HandlerRegistry().get(f"{__name__}:Sample")
    assert isinstance(handler, Sample)


def test_unknown_name_lists_known_handlers() -> None:
    with pytest.raises(UnknownHandlerError) as info:
        HandlerRegistry().get("nope")
    assert "unknown handler 'nope'" in str(info.value)
    assert "math" in str(info.value) and "echo" in str(info.value)


def test_path_to_something_that_is_not_a_handler() -> None:
    with pytest.raises(RegistryError, match="not an AgentHandler"):
        HandlerRegistry().get("json:dumps")
    with pytest.raises(RegistryError, match="cannot import"):
        HandlerRegistry().get("no_such_module_xyz:Thing")


class NoEval(AgentHandler):
    name = "no_eval"

    async def run(self, ctx: RolloutContext) -> None:
        return None


def test_handler_missing_a_stage_is_refused_at_registration() -> None:
    registry = HandlerRegistry()
    with pytest.raises(
        RegistryError, match=r"handler 'no_eval' \(.*NoEval\) does not implement eval"
    ):
        registry.register(NoEval)
    assert "no_eval" not in registry.names()
    with pytest.raises(RegistryError, match="does not implement eval"):
        registry.get(f"{__name__}:NoEval")


def test_every_builtin_and_installed_handler_resolves() -> None:
    registry = HandlerRegistry()
    for name in registry.names():
        assert isinstance(registry.get(name), AgentHandler), name
