"""Third-party agent harnesses, run unmodified inside a rollout's sandbox.

`HarnessConfig` (config.py) names a harness and its settings and turns it into a `Launch`
(base.py);
`run_harness` (runner.py) runs it behind the in-sandbox bridge (bridge.py) against the
rollout's recording LLM proxy (`RolloutContext.open_llm_proxy`); `outcome_error` maps how it
ended onto the outcome taxonomy. `HarnessAgent` (agent.py) is each preset as an agent, run
on any task.
"""

from agentroll.handlers.harness.agent import HarnessAgent
from agentroll.handlers.harness.base import API_KEY, LLM_ORIGIN, HarnessBase, Launch
from agentroll.handlers.harness.claude_code import ClaudeCodeHarness
from agentroll.handlers.harness.codex import CodexHarness
from agentroll.handlers.harness.config import HarnessConfig, MiniSweAgentHarness, ShellHarness
from agentroll.handlers.harness.gemini_cli import GeminiCliHarness
from agentroll.handlers.harness.opencode import OpenCodeHarness
from agentroll.handlers.harness.qwen_code import QwenCodeHarness
from agentroll.handlers.harness.runner import (
    BRIDGE_FAILED,
    HarnessRun,
    bridge_source,
    new_folder,
    outcome_error,
    run_harness,
)

__all__ = [
    "API_KEY",
    "BRIDGE_FAILED",
    "LLM_ORIGIN",
    "ClaudeCodeHarness",
    "CodexHarness",
    "GeminiCliHarness",
    "HarnessAgent",
    "HarnessBase",
    "HarnessConfig",
    "HarnessRun",
    "Launch",
    "MiniSweAgentHarness",
    "OpenCodeHarness",
    "QwenCodeHarness",
    "ShellHarness",
    "bridge_source",
    "new_folder",
    "outcome_error",
    "run_harness",
]
