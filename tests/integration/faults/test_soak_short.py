"""The soak benchmark's short variant: a minute of mixed sandboxed rollouts with pause/resume
cycles and backend churn. Asserts only what must never happen, whatever the speed: a lost or
repeated result, an infra failure with a reward, a process, lease or descriptor left over."""

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

SOAK = Path(__file__).resolve().parents[3] / "benchmarks" / "soak.py"


def load_soak() -> ModuleType:
    if str(SOAK.parent) not in sys.path:  # as when run as a script: it imports soak_figures
        sys.path.insert(0, str(SOAK.parent))
    spec = importlib.util.spec_from_file_location("agentroll_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_short_soak_loses_and_leaks_nothing(tmp_path: Path) -> None:
    soak = load_soak()
    cfg = soak.SoakConfig(
        duration_s=60,
        concurrency=24,
        latency_s=0.3,
        pause_every_s=15,
        pause_hold_s=0.5,
        churn_every_s=10,
        sample_every_s=2,
        families=("code", "math", "stem"),
        drain_timeout_s=120,
        workdir=tmp_path,
    )
    r = soak.run_soak(cfg)
    soak.print_report(cfg, r)  # shown with -s, and in the log of a failing run
    assert r.server_died_at_s is None, (tmp_path / "server.log").read_text()[-3000:]
    assert r.pauses >= 2 and r.churns >= 3  # the faults really happened
    assert r.received == r.submitted > 2 * cfg.concurrency
    assert r.lost == [] and r.duplicates == 0
    assert r.infra_with_reward == 0
    assert r.leaked_children == [] and r.leaked_sandbox_procs == []
    assert r.leftover_leases == [] and r.leftover_sandbox_dirs == []
    assert r.idle_fds_after <= r.idle_fds_before
    assert r.server_exit_code in (0, -15)
