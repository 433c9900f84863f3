"""`agentroll serve` as the README starts it: a token generated in its state directory, found
by the clients on the machine, kept across restarts; an unsafe token file stops it."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentroll.server.launch import agentroll_process
from agentroll.server.schema.auth import API_TOKEN_ENV, TOKEN_FILE_ENV
from agentroll.trainer_clients import RolloutClient

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with nothing configured: the README's `agentroll serve`."""
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    monkeypatch.delenv(API_TOKEN_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_serve_generates_a_token_that_clients_on_the_machine_find(fresh_dir: Path) -> None:
    token_file = fresh_dir / "var" / "api-token"
    with agentroll_process(["serve", "--port", "0"], fresh_dir, "server") as server:
        st = token_file.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
        assert server.token == token_file.read_text().strip()
        unauthenticated = httpx.get(f"{server.url}/v1/results", timeout=30)
        assert unauthenticated.status_code == 401
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        with RolloutClient(server.url) as client:  # no token given: var/api-token, loopback
            assert client.status().accepting
        first = server.token
    assert "generated an API token in var/api-token" in server.log.read_text()
    with agentroll_process(["serve", "--port", "0"], fresh_dir, "again") as again:
        assert again.token == first  # a restart on the same state dir keeps it


def test_serve_refuses_a_token_file_others_can_read(fresh_dir: Path) -> None:
    token_file = fresh_dir / "var" / "api-token"
    token_file.parent.mkdir()
    token_file.write_text("seen-by-everyone\n")
    token_file.chmod(0o644)
    serve = [sys.executable, "-m", "agentroll.server.cli", "serve", "--port", "0"]
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2
    assert "agentroll: error: token file var/api-token is not a private file" in refused.stderr
    assert "may have leaked" in refused.stderr
