"""Choosing a backend imports only that backend: the helpers they share live in
sandbox_inside.py."""

import subprocess
import sys

import pytest

BACKENDS = ("bwrap", "local", "singularity")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_imports_no_other_backend(backend: str) -> None:
    code = (
        "import sys\n"
        f"import agentroll.runtime.{backend}\n"
        f"print(','.join(m for m in {BACKENDS!r} if f'agentroll.runtime.{{m}}' in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == backend
