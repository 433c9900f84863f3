"""Each package's errors have one root and one home (its `errors.py`, whose docstring draws
the tree), and every error it exports derives from the root."""

import ast
import builtins
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOTS = {
    "agentroll.handlers": "HandlerError",
    "agentroll.handlers.toolcalls": "agentroll.handlers:HandlerError",
    "agentroll.runtime": "AgentrollRuntimeError",
    "agentroll.runtime.action": "agentroll.runtime:AgentrollRuntimeError",
    "agentroll.runtime.images": "agentroll.runtime:AgentrollRuntimeError",
    "agentroll.server.errors": "ServerError",
    "agentroll.trainer_clients": "ClientError",
}


def _root(package: str) -> type[BaseException]:
    module, _, name = ROOTS[package].rpartition(":")
    root = getattr(importlib.import_module(module or package), name)
    assert isinstance(root, type) and issubclass(root, Exception)
    return root


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exported_error_derives_from_the_package_root(package: str) -> None:
    module = importlib.import_module(package)
    root = _root(package)
    errors = [
        getattr(module, name)
        for name in module.__all__
        if isinstance(getattr(module, name), type)
        and issubclass(getattr(module, name), BaseException)
    ]
    assert errors, f"{package} exports no errors"
    strays = [e.__name__ for e in errors if not issubclass(e, root)]
    assert strays == [], f"{package}: not under {root.__name__}: {strays}"


HOMES = {
    "server": "server/agentroll/server/errors.py",
    "handlers": "handlers/agentroll/handlers/errors.py",
    "runtime": "runtime/agentroll/runtime/errors.py",
    "trainer_clients": "trainer_clients/agentroll/trainer_clients/errors.py",
}
# A program sent to a sandbox as its own source can import no second file of ours.
# Programs another interpreter runs (the sandbox's, a verifiers environment's): they cannot
# import agentroll's errors module.
STANDALONE = {
    "handlers/agentroll/handlers/builtin/code/code_runner.py",
    "handlers/agentroll/handlers/builtin/verifiers_env/legacy_worker.py",
}
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def _classes(package: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """Per file of the package: its top-level classes and the names of their bases."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        found[str(path.relative_to(ROOT))] = [
            (node.name, [ast.unparse(base).rpartition(".")[2] for base in node.bases])
            for node in tree.body
            if isinstance(node, ast.ClassDef)
        ]
    return found


@pytest.mark.parametrize("folder", sorted(HOMES))
def test_every_public_exception_lives_in_the_package_errors_module(folder: str) -> None:
    classes = _classes((ROOT / HOMES[folder]).parent)
    errors = set(BUILTIN_ERRORS)
    grew = True
    while grew:  # a class is an exception when one of its bases is (defined anywhere)
        before = len(errors)
        errors |= {
            name for found in classes.values() for name, bases in found if errors & set(bases)
        }
        grew = len(errors) > before
    strays = [
        f"{path}: {name}"
        for path, found in classes.items()
        for name, _ in found
        if name in errors
        and not name.startswith("_")
        and path != HOMES[folder]
        and path not in STANDALONE
    ]
    assert strays == [], f"define these in {HOMES[folder]} (re-export where they were)"


@pytest.mark.parametrize("folder", sorted(HOMES))
def test_the_errors_docstring_draws_every_class_of_the_tree(folder: str) -> None:
    home = ROOT / HOMES[folder]
    tree = ast.parse(home.read_text())
    drawn = ast.get_docstring(tree) or ""
    defined = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    public = [name for name in defined if not name.startswith("_")]
    assert public, f"{home} defines no errors"
    assert [name for name in public if name not in drawn] == []
