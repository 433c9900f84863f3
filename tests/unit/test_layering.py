"""docs/design.md (layout): trainer_clients -> server.schema; server -> handlers -> runtime;
server -> runtime; handlers -> server.schema.messages (the conversation's types, nothing
else of the server); the test doubles (agentroll.testing) only where tests, the demo and the
command line ask for them. Inside the server, a job's life is one package
(agentroll.server.jobs) that never climbs back up into what uses it."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "handlers": ("agentroll.server", "agentroll.trainer_clients", "agentroll.testing"),
    "runtime": (
        "agentroll.server",
        "agentroll.handlers",
        "agentroll.trainer_clients",
        "agentroll.testing",
    ),
    "trainer_clients": ("agentroll.handlers", "agentroll.runtime", "agentroll.testing"),
}
# The one module of the server's schema that every layer shares: types only.
SHARED = "agentroll.server.schema.messages"
# A production path never runs a stand-in by accident: only these modules reach the doubles.
TESTING_USERS = {"server/agentroll/server/cli.py", "server/agentroll/server/demo.py"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_dependency_direction(folder: str) -> None:
    violations = []
    for path in (ROOT / folder).rglob("*.py"):
        for name in _imports(path):
            if name.startswith(FORBIDDEN[folder]) and name != SHARED:
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
            if (
                folder == "trainer_clients"
                and name.startswith("agentroll.server")
                and not name.startswith("agentroll.server.schema")
            ):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "\n".join(violations)


def test_production_code_does_not_import_the_test_doubles() -> None:
    violations = []
    for path in (ROOT / "server/agentroll/server").rglob("*.py"):
        where = str(path.relative_to(ROOT))
        for name in _imports(path):
            if name.startswith("agentroll.testing") and where not in TESTING_USERS:
                violations.append(f"{where} imports {name}")
    assert not violations, "\n".join(violations)


def test_no_namespace_init_files() -> None:
    inits = [p for p in ROOT.glob("*/agentroll/__init__.py")]
    assert inits == [], "agentroll is a PEP 420 namespace: no agentroll/__init__.py"


def test_client_import_stays_light() -> None:
    code = (
        "import sys, agentroll.trainer_clients, agentroll.trainer_clients.weights\n"
        "heavy = [m for m in ('fastapi', 'starlette', 'uvicorn', 'tokenizers', 'jinja2', "
        "'sympy', 'torch', 'safetensors', 'agentroll.handlers', 'agentroll.runtime') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


SERVER = ROOT / "server"
JOBS = "agentroll.server.jobs"


def _server_modules() -> dict[str, Path]:
    """Every module of `agentroll.server` by dotted name (a package by its own name)."""
    modules = {}
    for path in (SERVER / "agentroll/server").rglob("*.py"):
        parts = path.relative_to(SERVER).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _server_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The server modules `path` imports, each with the packages importing it runs first."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(
            ".".join(parts[:i]) for i in range(3, len(parts) + 1) if ".".join(parts[:i]) in modules
        )
    return found


def _reach(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_the_job_life_is_one_package_with_no_climbs_back_up() -> None:
    """`agentroll.server.jobs` (admission, the stages, the rollout, the commit) uses the rest
    of the server only through modules that never lead back into it; the rest of the server
    uses it only through the package's surface."""
    modules = _server_modules()
    graph = {name: _server_imports(path, modules) for name, path in modules.items()}
    inside = {name for name in modules if name == JOBS or name.startswith(JOBS + ".")}
    assert {f"{JOBS}.{m}" for m in ("service", "pipeline", "rollout", "context")} <= inside
    climbs = sorted(
        f"{name} imports {used}, which leads back into {JOBS}"
        for name in inside
        for used in graph[name] - inside
        if _reach(used, graph) & inside
    )
    assert not climbs, "\n".join(climbs)
    reaching_in = sorted(
        f"{name} imports {used}"
        for name in set(modules) - inside
        for used in graph[name] & inside
        if used != JOBS
    )
    assert not reaching_in, "\n".join(reaching_in)
