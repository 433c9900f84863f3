"""The server's secrets (API tokens, keys in its environment) never reach a sandbox: a rollout
reads its environment every way a tool can, through a real server process."""

import shutil
from pathlib import Path

import pytest
from tests.integration.faults.fault_handlers import ENV_PROBE
from tests.integration.faults.support import wait_ready

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]

SECRETS = {
    "AGENTROLL_API_TOKEN": "tok-api-5f1e0c",
    "AGENTROLL_ADMIN_TOKEN": "tok-admin-9a7b3d",
    "OPENAI_API_KEY": "sk-key-2c8e44",
    "HF_TOKEN": "hf-tok-71d0aa",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0b9f12",
}


def test_server_environment_is_invisible_inside_sandboxes(tmp_path: Path) -> None:
    env = {"AGENTROLL_SANDBOX": f'{{"type": "bwrap", "state_dir": "{tmp_path / "sb"}"}}'}
    serve = ["serve", "--port", "0", "--db", str(tmp_path / "a.db")]
    with agentroll_process(serve, tmp_path, "server", env={**env, **SECRETS}) as server:
        client = wait_ready(server.url, token=SECRETS["AGENTROLL_API_TOKEN"])
        client.submit([{"job_id": "probe", "handler": ENV_PROBE, "instance": {}}])
        t = client.wait_for(["probe"], 120)["probe"]
        client.close()
    assert t.outcome is Outcome.ok, t.error
    reads = t.artifacts
    assert set(reads) == {"bash_env", "bash_environ", "exec_env", "all_environs", "python_env"}
    for how, text in reads.items():
        assert "PATH" in text, (how, text[:500])  # the probe did read an environment
        for name, value in SECRETS.items():
            assert value not in text, f"{name} visible inside the sandbox via {how}"
            assert name not in text, f"{name} visible inside the sandbox via {how}"
    assert "secret" not in (tmp_path / "server.log").read_text().lower()
