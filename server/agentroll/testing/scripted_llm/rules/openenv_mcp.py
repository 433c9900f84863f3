"""The `openenv_mcp_guess` rule: plays the OpenEnv guessing game through a harness's MCP tool.

A coding-agent CLI given an OpenEnv MCP environment's tools offers the environment's `guess`
under its own name for MCP tools (Claude Code and Qwen Code: `mcp__openenv__guess`, Gemini
CLI: `mcp_openenv_guess`, OpenCode: `openenv_guess`; Codex offers it as `guess` in a Responses
API `namespace`, which the proxy's chat view does not show). When such a
tool is offered, the rule binary-searches 1 to 10 with it, reading the environment's feedback
(`higher`, `lower`, `correct`) from each tool answer however the CLI wraps it, and says it is
done in plain text once the guess is correct, which ends the CLI's loop. Calls that offer no
such tool (a CLI's session title) are not its business.
"""

import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.openenv import guesses, next_guess
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools

DONE = "Found it: the environment said correct."
SERVER = "openenv"
_FEEDBACK = re.compile(r"\b(correct|higher|lower)\b")


def _feedback(answer: str) -> str:
    found = _FEEDBACK.search(answer)
    if found is None:
        raise ValueError("no feedback in the tool's answer")
    return found.group(1)


def mcp_guess_tool(conv: Conversation) -> str | None:
    """The environment's `guess` as the CLI names an MCP server's tool."""
    names = [
        n for n in offered_tools(conv) if n == "guess" or (SERVER in n and n.endswith("guess"))
    ]
    return names[0] if len(names) == 1 else None


def openenv_mcp_guess_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    tool = mcp_guess_tool(conv)
    if tool is None:
        return None
    history = guesses(conv, "n", _feedback)
    if history and history[-1][1] == "correct":
        return Reply(DONE)
    guess = next_guess(history)
    return call(tool, {"n": guess}, f"I guess {guess}.")
