"""The `openreward_guess` rule: plays the Open Reward Standard guessing game of
`agentroll.testing.openreward` through its `guess` tool.

When the `guess` tool is offered and the task is the game's prompt, it reads its own earlier
guesses and the environment's answers (`higher` / `lower`) back from the conversation and
guesses the middle of what is left, the way `openenv_guess` does. Task markers make it act
badly on purpose: `GUESS 11 FIRST` (its first guess is 11, which the game's input model
refuses; then it plays on) and `ALWAYS GUESS 11` (it never stops guessing 11).
"""

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.openenv import INVALID, guesses, next_guess
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

PROMPT = "Guess the number from 1 to 10"


def _answered_feedback(answer: str) -> str:
    if answer.startswith("Error:"):
        raise ValueError(answer)
    return answer.strip()


def openreward_guess_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    task = task_text(conv)
    if "guess" not in offered_tools(conv) or PROMPT not in task:
        return None
    history = guesses(conv, "number", _answered_feedback)
    if "ALWAYS GUESS 11" in task or ("GUESS 11 FIRST" in task and not history):
        return call("guess", {"number": INVALID}, "Let me try 11.")
    guess = next_guess(history)
    return call("guess", {"number": guess}, f"I guess {guess}.")
