"""The real install path: the wheel, installed with the `server` extra into a fresh virtualenv
outside the checkout, runs the demo with every rollout `ok`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]
ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_with_the_server_extra_runs_the_demo(tmp_path: Path) -> None:
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        tmp_path, 600)  # fmt: skip
    (wheel,) = wheels.glob("agentroll-*.whl")
    base = getattr(sys, "_base_executable", sys.executable)  # not this venv's interpreter
    run([base, "-m", "venv", str(venv)], tmp_path, 120)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", f"{wheel}[server]"], tmp_path, 900)
    probe = "import agentroll.server; print(agentroll.server.__file__)"
    where = run([str(python), "-c", probe], tmp_path, 60)
    assert where.stdout.startswith(str(venv))  # the installed package, not the checkout
    demo = run([str(venv / "bin" / "agentroll"), "demo", "--groups", "8", "--group-size", "2"],
               tmp_path, 600)  # fmt: skip
    out = demo.stdout
    assert "submitting 16 rollouts: 8 groups of 2 over swe, code, math, stem" in out, out
    assert "outcomes {'ok': 16}" in out, out[-3000:]
