"""deploy/slurm on a real Slurm: sbatch the rollout servers, train through them, scancel.

Starts a private one-node Slurm (scripts/start-test-slurm.sh: munged, slurmctld, slurmd,
all under a temporary state dir, installing Debian's slurm-wlm if missing), submits
deploy/slurm/rollout-servers.sbatch with two tasks, registers the scripted vLLM stand-in
through deploy/slurm/launch.sh, runs GRPO groups and sandboxed jobs through the server
list, then cancels the Slurm job and checks that no server or sandbox process is left.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import GroupCollector, GroupSpec, ServerPool

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(os.sys.executable).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


@pytest.fixture
def slurm() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs slurmd, which needs root")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        pytest.skip("slurm-wlm is not installed and apt-get is unavailable to install it")
    # short path: the munge socket must fit a Unix socket address (108 bytes)
    state = Path(tempfile.mkdtemp(prefix="ar-slurm-", dir="/tmp"))
    env = {
        **os.environ,
        "AGENTROLL_SLURMCTLD_PORT": str(_free_port()),
        "AGENTROLL_SLURMD_PORT": str(_free_port()),
    }
    try:
        subprocess.run(
            [ROOT / "scripts/start-test-slurm.sh", state], env=env, check=True, timeout=600
        )
        yield {**env, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        stop = [ROOT / "scripts/stop-test-slurm.sh", state, "--purge"]
        subprocess.run(stop, check=False, timeout=120)


def _math_requests() -> list[JobRequest]:
    from agentroll.handlers.builtin.math import load_math_tasks

    return [
        JobRequest(handler="math", instance=t.instance(), sampling={"max_tokens": 128, "seed": 7})
        for t in load_math_tasks()[:6]
    ]


def test_rollout_servers_under_slurm_serve_groups_and_leave_nothing_behind(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    from agentroll.runtime import procs

    servers_file = tmp_path / "servers.txt"
    state = tmp_path / "node-scratch"
    env = {
        **slurm,
        "AGENTROLL_SERVER_LIST": str(servers_file),
        "AGENTROLL_HOST": "127.0.0.1",
        "AGENTROLL_BIN": str(VENV_BIN / "agentroll"),
        "AGENTROLL_STATE": str(state),
        "AGENTROLL_DEPLOY_DIR": str(ROOT / "deploy/slurm"),
        "AGENTROLL_SHUTDOWN_GRACE_S": "1",  # well inside the test cluster's KillWait (5 s)
        "AGENTROLL_SANDBOX": json.dumps({"type": "bwrap", "state_dir": str(tmp_path / "sb")}),
        "AGENTROLL_LOG_LEVEL": "warning",
        "PYTHONPATH": str(ROOT),  # the sandboxed test handler lives in tests/
    }
    sandboxes_before = {p.pid for p in procs.scan() if p.sandbox_id}
    with agentroll_process(["scripted-llm", "--port", "0"], tmp_path, "llm") as llm:
        submitted = subprocess.run(
            [
                "sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                f"--chdir={ROOT}", f"--output={tmp_path}/slurm-%j.out",
                str(ROOT / "deploy/slurm/rollout-servers.sbatch"),
            ],
            env=env, check=True, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        job_id = submitted.stdout.strip().split(";")[0]
        try:
            launch = [ROOT / "deploy/slurm/launch.sh", servers_file, "2", "--backend", llm.url]
            launched = subprocess.run(
                launch, env={**env, "LAUNCH_TIMEOUT_S": "90"},
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert launched.returncode == 0, launched.stderr + _logs(tmp_path, state)
            urls = [line for line in launched.stdout.splitlines() if line.startswith("http://")]
            assert len(urls) == 2 and "registered 1 backend(s) with 2 rollout server(s)" in (
                launched.stdout
            )

            with ServerPool(servers_file, poll_wait_s=1.0) as pool:
                assert sorted(pool.urls) == sorted(urls)
                assert all(
                    [b.id for b in s.backends] == ["vllm-0"] for s in pool.statuses().values()
                )
                with GroupCollector(pool, max_retries=1) as collector:
                    specs = [GroupSpec(f"m{i}", r, 4) for i, r in enumerate(_math_requests())]
                    groups = collector.collect(specs, timeout_s=60)
                assert len(groups) == 6 and all(g.valid for g in groups)
                assert all(len(g.trajectories) == 4 for g in groups)
                assert {t.handler for g in groups for t in g.trajectories} == {"math"}
                # long sandboxed jobs on both servers, running when the Slurm job is cancelled
                sleeper = "tests.integration.server.sandbox_handlers:Sleeper"
                pool.submit(
                    JobRequest(
                        job_id=f"sleep{i}", group_id=f"sleep{i}", handler=sleeper, instance={}
                    )
                    for i in range(4)
                )
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    running = sum(s.jobs_by_state.get("run", 0) for s in pool.statuses().values())
                    if running == 4:
                        break
                    time.sleep(0.1)
                assert running == 4
            ours = {p.pid for p in procs.scan() if p.sandbox_id} - sandboxes_before
            assert ours, "the sleeper jobs run in sandboxes"
            pids = [int(p.read_text()) for p in state.glob("*/*.pid")]
            assert len(pids) == 4 and all(_alive(pid) for pid in pids)  # 2 tasks + 2 servers
        finally:
            subprocess.run(["scancel", job_id], env=env, check=False, timeout=30)

        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            queued = subprocess.run(
                ["squeue", "-h", "-j", job_id], env=env, capture_output=True, text=True, check=False
            ).stdout.strip()
            left = [pid for pid in pids if _alive(pid)]
            sandboxes = {p.pid for p in procs.scan() if p.sandbox_id} - sandboxes_before
            if not queued and not left and not sandboxes:
                break
            time.sleep(0.2)
        assert not left, f"server processes left after scancel: {left}\n{_logs(tmp_path, state)}"
        assert not sandboxes, f"sandbox processes left after scancel: {sorted(sandboxes)}"
        assert not queued


def _logs(tmp_path: Path, state: Path) -> str:
    files = [*tmp_path.glob("slurm-*.out"), *state.glob("*/server.log")]
    return "\n".join(f"--- {f}\n{f.read_text()[-2000:]}" for f in files)
