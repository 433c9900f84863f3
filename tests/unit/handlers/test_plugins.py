"""The generic registry every named-plugin lookup uses (handlers, parsers, scripted rules)."""

import json

import pytest

from agentroll.handlers import RegistryError
from agentroll.handlers.plugins import PluginRegistry, load_object


class Unknown(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"no {name!r} among {known}")


class Duplicate(ValueError):
    pass


class LoadFailed(KeyError):
    pass


def _as_callable(obj: object, origin: str) -> object:
    if not callable(obj):
        raise TypeError(f"{origin} is not callable: {obj!r}")
    return obj


def _registry(**kw: object) -> PluginRegistry[object]:
    options: dict[str, object] = dict(
        convert=_as_callable, unknown=Unknown, duplicate=Duplicate,
        builtins={"dumps": "json:dumps"},
    )  # fmt: skip
    options.update(kw)
    return PluginRegistry("rule", **options)  # type: ignore[arg-type]


def test_resolution_order_registration_builtin_then_path() -> None:
    registry = _registry()
    assert registry.names() == ["dumps"]
    assert registry.get("dumps") is json.dumps
    assert registry.get("json:loads") is json.loads
    registry.register("mine", len)
    assert registry.get("mine") is len
    assert registry.names() == ["dumps", "mine"]


def test_names_claimed_twice_are_errors_unless_replaced() -> None:
    registry = _registry()
    registry.register("mine", len)
    with pytest.raises(Duplicate, match="rule 'mine' is already registered"):
        registry.register("mine", abs)
    with pytest.raises(Duplicate, match="rule 'dumps' is already registered"):
        registry.register("dumps", abs)
    registry.register("dumps", abs, replace=True)  # registration wins over the built-in
    assert registry.get("dumps") is abs


def test_unknown_names_and_bad_plugins_use_the_owners_errors() -> None:
    registry = _registry(load_error=LoadFailed)
    with pytest.raises(Unknown, match=r"no 'nope' among \['dumps'\]"):
        registry.get("nope")
    with pytest.raises(LoadFailed, match="cannot import 'no_such_module_xyz'"):
        registry.get("no_such_module_xyz:f")
    with pytest.raises(LoadFailed, match="has no attribute 'nope'"):
        registry.get("json:nope")
    with pytest.raises(TypeError, match="'json:__name__' is not callable"):
        registry.get("json:__name__")
    with pytest.raises(TypeError, match="rule 'x' is not callable"):
        registry.register("x", 42)


def test_entry_points_join_the_names_and_may_not_claim_a_builtin() -> None:
    # The fixture package (installed by the set-up) declares `echo` in agentroll.handlers.
    registry = _registry(group="agentroll.handlers")
    assert "echo" in registry.names()
    assert getattr(registry.get("echo"), "__module__", None) == "agentroll_example_handler"
    claimed = _registry(group="agentroll.handlers", builtins={"echo": "json:dumps"})
    with pytest.raises(Duplicate, match="claims the built-in rule name 'echo'"):
        claimed.get("echo")


def test_load_object_follows_dotted_attributes() -> None:
    assert load_object("json:JSONDecoder.decode") is json.JSONDecoder.decode
    with pytest.raises(RegistryError, match="not a 'module:Class' path"):
        load_object("json")
