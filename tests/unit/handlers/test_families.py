"""Built-in task families are found by what their folders declare (`HANDLERS` in each
`__init__.py`), read without importing them."""

import json
import subprocess
import sys
from abc import ABC
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentroll.handlers import DuplicateHandlerError, HandlerRegistry, RegistryError, builtin
from agentroll.handlers.families import builtin_families, declared_handlers

BUILTIN_NAMES = {
    "code",
    "harbor",
    "llm_judge",
    "math",
    "openenv",
    "openreward",
    "remote_verify",
    "solve_verify",
    "stem",
    "swe",
    "verifiers",
    "verifiers_legacy",
}

FAMILY_INIT = """
from agentroll.handlers import AgentHandler, Reward, RolloutContext

HANDLERS = {"%(name)s": "Probe"}


class Probe(AgentHandler):
    name = "%(name)s"

    async def run(self, ctx: RolloutContext) -> None:
        return None

    async def eval(self, ctx: RolloutContext) -> Reward:
        return Reward(1.0)
"""


def add_family(root: Path, folder: str, handler_name: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "__init__.py").write_text(FAMILY_INIT % {"name": handler_name})


@pytest.fixture
def extra_builtin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A second folder of the built-in package, as if its families were shipped there."""
    monkeypatch.setattr(builtin, "__path__", [*builtin.__path__, str(tmp_path)])
    yield tmp_path
    for module in [m for m in sys.modules if m.startswith(f"{builtin.__name__}.tmpfam")]:
        del sys.modules[module]


def test_every_builtin_family_is_found_with_a_path_that_resolves() -> None:
    found = builtin_families()
    assert set(found) == BUILTIN_NAMES
    # The public module:Class paths users may have written keep resolving.
    assert found["swe"] == "agentroll.handlers.builtin.swe:SweHandler"
    assert found["math"] == "agentroll.handlers.builtin.math:MathHandler"
    registry = HandlerRegistry()
    for name in BUILTIN_NAMES:
        assert registry.get(name).name == name


def test_a_registry_imports_no_family_until_a_job_names_one() -> None:
    # In a fresh interpreter: this one has imported families for other tests already.
    program = (
        "import json, sys\n"
        "from agentroll.handlers import HandlerRegistry\n"
        "names = HandlerRegistry().names()\n"
        "print(json.dumps([names, [m for m in sys.modules if m.startswith("
        "'agentroll.handlers.builtin.')]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, check=True)
    names, imported = json.loads(out.stdout)
    assert set(names) >= BUILTIN_NAMES
    assert imported == []


def test_a_new_folder_is_a_new_family(extra_builtin_folder: Path) -> None:
    add_family(extra_builtin_folder, "tmpfam_probe", "probe")
    registry = HandlerRegistry()
    assert "probe" in registry.names()
    handler = registry.get("probe")
    assert type(handler).__module__ == "agentroll.handlers.builtin.tmpfam_probe"


def test_a_name_two_families_declare_is_refused(extra_builtin_folder: Path) -> None:
    add_family(extra_builtin_folder, "tmpfam_second_math", "math")
    with pytest.raises(DuplicateHandlerError, match="'math' is declared twice"):
        HandlerRegistry()


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("HANDLERS = dict(x='X')", "must be a literal dict"),
        ("HANDLERS = {'x': X}", "must be a literal dict"),
        ("HANDLERS = ['x']", "must map handler names to class names"),
        ("HANDLERS = {'x': ''}", "must map handler names to class names"),
    ],
)
def test_a_declaration_that_is_not_a_literal_map_is_refused(source: str, problem: str) -> None:
    with pytest.raises(RegistryError, match=problem):
        declared_handlers(source, "family/__init__.py")


def test_modules_without_a_declaration_declare_nothing() -> None:
    assert declared_handlers('"""Grading helpers; see HANDLERS elsewhere."""\n', "m.py") == {}
    assert declared_handlers("HANDLERS: dict[str, str] = {'a': 'A'}\n", "m.py") == {"a": "A"}


def test_every_builtin_handler_is_at_most_one_base_below_agent_handler() -> None:
    # AgentHandler -> one base (a task: ToolAgentHandler) -> the family. What families
    # share beyond that is composed (e.g. `FinalAnswer`), never another layer or a mixin.
    registry = HandlerRegistry()
    for name in BUILTIN_NAMES:
        chain = [c.__name__ for c in type(registry.get(name)).__mro__ if c not in (ABC, object)]
        assert len(chain) <= 3 and chain[-1] == "AgentHandler", f"{name}: {' <- '.join(chain)}"
