"""The red-team attack on the API token, in a batch of its own beside an honest rollout: the
policy hunts for the server's token from its sandbox and finds nothing to use."""

import asyncio
import shutil
from pathlib import Path

import pytest

from agentroll.server.schema import Outcome
from agentroll.testing.redteam import ATTACKS, run_batch

pytestmark = [
    pytest.mark.redteam,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="make test installs bubblewrap"),
]


def test_a_policy_hunting_for_the_api_token_finds_nothing(
    tmp_path_factory: pytest.TempPathFactory, server_token_file: Path
) -> None:
    attack = {"steal_api_token": ATTACKS["steal_api_token"]}
    workdir = tmp_path_factory.mktemp("rt-auth")  # short: sandbox sockets live under it
    batch = asyncio.run(run_batch(workdir, attack, honest=1))
    token = server_token_file.read_text().strip()  # the server generated it there
    t = batch.attacks["steal_api_token"]
    observed = "\n".join(str(m.get("content")) for m in t.messages if m.get("role") == "tool")
    assert "hunt-done" in observed and "closed 8700" in observed, t  # the hunt did run
    assert token not in t.model_dump_json()
    assert [line for line in observed.splitlines() if line.rstrip().endswith("api-token")] == []
    # The policy's own doing, scored on its answer; its honest neighbour is untouched.
    assert (t.outcome, t.reward) == (Outcome.ok, 1.0)
    assert [(h.outcome, h.reward) for h in batch.honest.values()] == [(Outcome.ok, 1.0)]
    assert not batch.leaked_pids
