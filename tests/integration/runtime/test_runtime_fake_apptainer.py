"""The Apptainer CLI double really runs instances, and leaks a helper like the real one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP, make_config, marked_pids

from agentroll.runtime import SandboxSpec, procs
from agentroll.runtime.singularity import SingularityRuntime
from agentroll.testing.fake_apptainer import write_shim

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")]


def test_cli_lifecycle_leaves_an_escaped_helper(state_dir: Path) -> None:
    shim = write_shim(state_dir)
    env = {
        "PATH": "/usr/bin:/bin",
        "FAKE_APPTAINER_DIR": str(state_dir / "fake"),
        "AGENTROLL_SANDBOX_ID": "clitest",
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(shim), *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
            start_new_session=True,
        )

    assert cli("version").stdout.startswith("apptainer version")
    pid_file = state_dir / "pid"
    start = cli("instance", "start", "--containall", "--net", "--network", "none",
                "--pid-file", str(pid_file), "/", "agentroll-clitest")  # fmt: skip
    assert start.returncode == 0, start.stderr
    assert cli("instance", "start", "/", "agentroll-clitest").returncode != 0  # duplicate name
    listed = json.loads(cli("instance", "list", "--json").stdout)["instances"]
    assert [i["instance"] for i in listed] == ["agentroll-clitest"]
    assert int(pid_file.read_text()) == listed[0]["pid"]
    out = cli("exec", "--pwd", "/tmp", "instance://agentroll-clitest", "sh", "-c", "pwd; echo $$")
    assert out.stdout.split()[0] == "/tmp"
    found = procs.select(procs.scan(), "clitest", cmdline_marker=b"agentroll-clitest")
    helpers = [p for p in found if b"squashfuse_ll" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(helpers) == 1 and os.getpgid(helpers[0]) == helpers[0]  # its own group
    assert "Stopping agentroll-clitest" in cli("instance", "stop", "agentroll-clitest").stdout
    assert procs.is_alive(helpers[0], None)  # stop did not clean it up...
    procs.kill(helpers)  # ...so this test does, as the runtime's marker search would


async def test_runtime_teardown_finds_the_escaped_helper(state_dir: Path) -> None:
    rt = make_config("fake-apptainer", state_dir).build()
    assert isinstance(rt, SingularityRuntime)
    sb = await rt.start(SandboxSpec(), timeout=60)
    pids = marked_pids(sb.id)
    cmdlines = [p.cmdline for p in procs.scan() if p.pid in pids]
    assert any(b"squashfuse_ll" in c for c in cmdlines)
    assert (await sb.exec(["hostname"], timeout=10)).exit_code == 0
    await sb.stop()
    assert marked_pids(sb.id) == []
    assert procs.select(procs.scan(), sb.id, cmdline_marker=f"agentroll-{sb.id}".encode()) == []
    await rt.close()


async def test_crashed_instance_fails_fast_with_its_log(state_dir: Path) -> None:
    rt = make_config("fake-apptainer", state_dir).build()
    with pytest.raises(Exception, match="directory images only"):
        await rt.start(SandboxSpec(image=state_dir / "missing.sif"), timeout=30)
    assert rt.live == [] and list(rt.leases.dir.iterdir()) == []
    await rt.close()
