"""The `openenv_guess` rule: plays the OpenEnv guessing game of `agentroll.testing.openenv`.

When the `step` tool is offered and the task shows an OpenEnv first observation, it reads its
own earlier guesses and the environment's feedback (`higher` / `lower`) back from the
conversation and guesses the middle of what is left (1 to 10): a binary search that always
finds the number. Two task markers make it act badly on purpose: `GUESS 11 FIRST` (its first
guess is 11, which the environment's action model refuses; then it plays on) and `ALWAYS
GUESS 11` (it never stops guessing 11).
"""

import json
from collections.abc import Callable

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

FIRST_OBSERVATION = "First observation:"
INVALID = 11


def guesses(
    conv: Conversation, argument: str, feedback_of: Callable[[str], str]
) -> list[tuple[int, str]]:
    """(guess, the environment's feedback or '' if refused), in order: each call's
    `argument`, and `feedback_of` its tool answer (raising on an error answer)."""
    numbers: list[int] = []
    for message in conv.messages:
        if message.role == "assistant" and "<tool_call>" in message.content:
            body = message.content.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
            numbers.append(int(json.loads(body)["arguments"][argument]))
    answers = [m.content for m in conv.messages if m.role == "tool"]
    out = []
    for guess, answer in zip(numbers, answers, strict=False):
        try:
            feedback = feedback_of(answer)
        except (ValueError, KeyError, TypeError):
            feedback = ""  # an error answer: the guess was refused
        out.append((guess, feedback))
    return out


def next_guess(history: list[tuple[int, str]]) -> int:
    """The middle of what the feedback (`higher` / `lower`) leaves of 1 to 10."""
    low, high = 1, 10
    for guess, feedback in history:
        if feedback == "higher":
            low = max(low, guess + 1)
        elif feedback == "lower":
            high = min(high, guess - 1)
    return (low + high) // 2


def _observed_feedback(answer: str) -> str:
    return str(json.loads(answer)["observation"]["feedback"])


def openenv_guess_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    task = task_text(conv)
    if "step" not in offered_tools(conv) or FIRST_OBSERVATION not in task:
        return None
    history = guesses(conv, "guess", _observed_feedback)
    if "ALWAYS GUESS 11" in task or ("GUESS 11 FIRST" in task and not history):
        return call("step", {"guess": INVALID}, "Let me try 11.")
    guess = next_guess(history)
    return call("step", {"guess": guess}, f"I guess {guess}.")
