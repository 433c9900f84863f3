"""`agentroll demo` as a newcomer meets it: with and without bubblewrap."""

import sys
from pathlib import Path

import pytest

from agentroll.server import demo
from agentroll.server.schema import ErrorInfo, Outcome, Trajectory

pytestmark = pytest.mark.integration


def _trajectory(job_id: str, outcome: Outcome, error: ErrorInfo | None = None) -> Trajectory:
    return Trajectory(
        job_id=job_id,
        handler="swe",
        outcome=outcome,
        status="failed" if outcome is Outcome.infra_error else "completed",
        reward=None if outcome is Outcome.infra_error else 0.0,
        error=error,
    )


def test_without_bubblewrap_it_says_so_up_front_and_runs_what_it_honestly_can(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no bwrap on it
    assert demo.run_demo(groups=4, group_size=2, latency_s=0.0) == 0
    out, err = capsys.readouterr()
    assert "bubblewrap (bwrap) is not installed" in err
    assert "cannot run the task families that\nneed an isolated sandbox: swe, code" in err
    assert "apt-get install bubblewrap" in err
    assert "submitting 8 rollouts: 4 groups of 2 over math, stem, solve_verify" in out
    assert "outcomes {'ok': 8}" in out
    assert "infra_error" not in out
    verifier = next(line for line in out.splitlines() if line.startswith("  verifier "))
    assert verifier.split()[1:6] == ["policy", "verifier", "frozen", "2", "traces"]


def test_the_summary_shows_a_missing_reward_and_the_errors_by_type(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lost = ErrorInfo(type="sandbox_failure", message="SandboxStartError: bwrap\nexited 1")
    results = [
        _trajectory("a", Outcome.infra_error, lost),
        _trajectory("b", Outcome.infra_error, lost),
        _trajectory(
            "c", Outcome.infra_error, ErrorInfo(type="llm_backend_unavailable", message="")
        ),
    ]
    demo._summary(results, ("swe",))
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("swe "))
    assert row.split()[:3] == ["swe", "3", "-"]  # no rollout earned a reward: not 0.00
    assert "infra_error sandbox_failure" in out and "x2" in out
    assert "e.g. SandboxStartError: bwrap exited 1" in out  # one example, on one line
    assert "llm_backend_unavailable" in out and "x1" in out


def test_with_bubblewrap_every_family_runs() -> None:
    assert demo.plan_families(has_bwrap=True) == ("swe", "code", "math", "stem", "solve_verify")
