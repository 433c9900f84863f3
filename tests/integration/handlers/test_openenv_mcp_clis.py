"""An OpenEnv MCP environment's tools under each coding-agent CLI preset: openenv-core 0.3.0's
own server (started here) serves the guessing game's `guess` tool; the CLI, unmodified from
the agent-cli image, reads the MCP configuration its preset wrote, lists the environment's
tools on the rollout proxy's `/mcp`, and the scripted policy plays the game through the tool
as that CLI names it. The job's reward is what the environment emitted."""

from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.support.cli_image import BUILD_TIMEOUT_S, cli_image
from tests.support.images import needs_real_build

from agentroll.server.schema import Outcome
from agentroll.testing.openenv import guess_mcp_server
from agentroll.testing.scripted_llm import default_rules
from agentroll.testing.scripted_llm.rules.openenv_mcp import DONE

pytestmark = [pytest.mark.integration, *needs_real_build]

# Each CLI's name for the environment's `guess` tool (an MCP server named `openenv`).
TOOL_NAMES = {
    "claude_code": "mcp__openenv__guess",
    "codex": "guess",  # in a Responses API `namespace` of the server's
    "gemini_cli": "mcp_openenv_guess",
    "opencode": "openenv_guess",
    "qwen_code": "mcp__openenv__guess",
}
# Their system prompts and tool schemas alone are up to ~30k tokens (Qwen Code).
CONTEXT = 131072


@pytest.fixture(scope="module")
def image() -> Path:
    return cli_image()


def job(cli: str, url: str, target: int, image: Path) -> dict[str, Any]:
    return {
        "job_id": cli,
        "task": "openenv",
        "agent": {"type": cli, "timeout_s": 240},
        "instance": {
            "server": {"url": url, "timeout_s": 30},
            "reset": {"target": target},
            "prompt": "Find the number with the guess tool.",
            "image": str(image),  # where the CLIs are
        },
        "sampling": {"seed": 3, "max_tokens": 512},
        "limits": {"run_timeout_s": 300},
    }


@pytest.mark.timeout(BUILD_TIMEOUT_S + 600)
@pytest.mark.parametrize("cli", sorted(TOOL_NAMES))
async def test_the_cli_calls_the_environments_mcp_tool_and_earns_its_reward(
    agentroll_server: ServerFactory, tmp_path: Path, image: Path, cli: str
) -> None:
    async with (
        guess_mcp_server() as env,
        scripted_backend(
            wrong_rate=0.0,
            rules=default_rules(),
            policy="openenv_mcp_guess",
            max_model_len=CONTEXT,
        ) as backend,  # fmt: skip
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        t = (await run_jobs(client, [job(cli, env.url, 7, image)], timeout_s=290))[cli]

    harness = t.metadata.get("harness", {})
    assert t.outcome is Outcome.ok, (t.error, harness)
    assert harness["exit_code"] == 0
    # The policy called the environment's tool by the CLI's name for it: 5, 8, 6, 7.
    calls = [c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or []]
    assert calls == [TOOL_NAMES[cli]] * 4
    assert [o["reward"] for o in t.metadata["openenv"]["observations"]] == [
        None, -0.1, -0.1, -0.1, 1.0,
    ]  # fmt: skip
    assert t.reward == pytest.approx(0.7)
    assert t.reward_info["done"] is True and t.reward_info["steps"] == 4
    assert t.messages[-1]["content"] == DONE
