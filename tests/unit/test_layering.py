"""docs/design.md (layout): trainer_clients -> server.schema; server -> handlers -> runtime;
server -> runtime."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "handlers": ("agentroll.server", "agentroll.trainer_clients"),
    "runtime": ("agentroll.server", "agentroll.handlers", "agentroll.trainer_clients"),
    "trainer_clients": ("agentroll.handlers", "agentroll.runtime"),
}


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
            if name.startswith(FORBIDDEN[folder]):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
            if (
                folder == "trainer_clients"
                and name.startswith("agentroll.server")
                and not name.startswith("agentroll.server.schema")
            ):
                violations.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not violations, "\n".join(violations)


def test_no_namespace_init_files() -> None:
    inits = [p for p in ROOT.glob("*/agentroll/__init__.py")]
    assert inits == [], "agentroll is a PEP 420 namespace: no agentroll/__init__.py"


def test_client_import_stays_light() -> None:
    code = (
        "import sys, agentroll.trainer_clients\n"
        "heavy = [m for m in ('fastapi', 'starlette', 'uvicorn', 'tokenizers', 'jinja2', "
        "'sympy', 'agentroll.handlers', 'agentroll.runtime') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
