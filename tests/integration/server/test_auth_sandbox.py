"""A policy in its sandbox cannot read the token the server generated, wherever the server
keeps its state: its own directory, or the sandbox runtime's state directory."""

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentroll.runtime import BwrapConfig, SandboxSpec
from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.server.auth import api_tokens
from agentroll.server.schema.auth import TOKEN_FILE_ENV
from agentroll.server.settings import Settings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap missing"),
]


@pytest.fixture
async def bwrap() -> AsyncIterator[tuple[BwrapRuntime, Path]]:
    # Short on purpose: Unix socket paths must stay under 108 bytes.
    state_dir = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    rt = BwrapConfig(state_dir=state_dir).build()
    try:
        yield rt, state_dir
    finally:
        await rt.close()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.mark.parametrize("where", ["own_state_dir", "sandbox_state_dir"])
async def test_a_sandbox_cannot_read_the_generated_token(
    where: str,
    bwrap: tuple[BwrapRuntime, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt, sandbox_state = bwrap
    monkeypatch.delenv(TOKEN_FILE_ENV)
    state = tmp_path / "state" if where == "own_state_dir" else sandbox_state
    token = api_tokens(Settings(db_path=state / "agentroll.db")).api
    token_file = state / "api-token"
    sb = await rt.start(SandboxSpec(), timeout=30)
    try:
        attack = await sb.exec(
            ["sh", "-c", f"cat {token_file}; ls -a {state}; env; cat /etc/os-release"],
            timeout=10,
        )
    finally:
        await sb.stop()
    assert token not in attack.stdout and token not in attack.stderr
    assert f"{token_file}: No such file" in attack.stderr
    assert "api-token" not in attack.stdout  # not even its name
    # The control: the same commands do read what the sandbox is meant to see.
    assert "ID=" in attack.stdout
