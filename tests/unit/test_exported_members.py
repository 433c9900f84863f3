"""Each package's `__all__`: every name exists, the list is sorted, nothing public is left out;
the trainer clients document every public method of what they export.

The order is ruff's (RUF022, isort-style): CONSTANTS, then Classes, then functions, each
alphabetical.
"""

import importlib
import inspect
import types

import pytest

PACKAGES = (
    "agentroll.handlers",
    "agentroll.handlers.agent",
    "agentroll.handlers.harness",
    "agentroll.handlers.toolcalls",
    "agentroll.runtime",
    "agentroll.runtime.action",
    "agentroll.runtime.images",
    "agentroll.trainer_clients",
    "agentroll.trainer_clients.adapters",
    "agentroll.trainer_clients.exports",
)


def _import(name: str) -> types.ModuleType:
    if name.endswith(".adapters"):
        pytest.importorskip("numpy")
    return importlib.import_module(name)


def _isort_key(name: str) -> tuple[int, str]:
    if len(name) > 1 and name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_exist_and_are_sorted(package: str) -> None:
    module = _import(package)
    names = list(module.__all__)
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{package}.__all__ names what it lacks: {missing}"
    assert len(set(names)) == len(names), f"{package}.__all__ repeats a name"
    assert names == sorted(names, key=_isort_key), f"{package}.__all__ is not sorted"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_member_is_exported(package: str) -> None:
    module = _import(package)
    ours = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", "").startswith("agentroll.")
    }
    lazy = set(getattr(module, "_EXPORTS", {}))  # agentroll.runtime imports on first use
    assert sorted((ours | lazy) - set(module.__all__)) == []


def _undocumented(cls: type) -> list[str]:
    return [
        name
        for name, member in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(member) or isinstance(member, property))
        and not inspect.getdoc(member)
    ]


def test_trainer_clients_document_every_public_method() -> None:
    module = _import("agentroll.trainer_clients")
    classes = [getattr(module, n) for n in module.__all__ if inspect.isclass(getattr(module, n))]
    gaps = {c.__name__: _undocumented(c) for c in classes if _undocumented(c)}
    assert gaps == {}
