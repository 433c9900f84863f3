"""`agentroll demo --engine vllm-cpu`: the demo's jobs against the real engine, same output."""

import asyncio
import shutil
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
    # Without bwrap on PATH the demo runs the three families that need no sandbox, each
    # once, against the session's engine (the next test runs the sandboxed ones).
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


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap")
def test_the_demos_sandboxed_families_end_scored_against_the_engine(
    vllm_engine: VLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With bubblewrap the first three groups are swe, code and math with its Python tool.
    code = asyncio.run(demo._run_against(3, 1, vllm_engine.url, "vllm-cpu", tmp_path))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "submitting 3 rollouts: 3 groups of 1 over swe, code, math" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    for family in ("swe", "code", "math"):
        _, n, reward, outcomes, *_ = rows[family]
        # Noise earns nothing, but every rollout is scored: a reward, never infra_error.
        assert (n, float(reward)) == ("1", 0.0), rows[family]
        assert outcomes in ("ok:1", "agent_error:1"), rows[family]
    assert "infra_error" not in out
