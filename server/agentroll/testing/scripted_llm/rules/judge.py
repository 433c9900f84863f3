"""The `judge` rules: a scripted judge model for the `llm_judge` handler's prompts.

`judge` grades like a plain model would: it finds the candidate answer in its delimited block
and the reference after `Reference answer:` (the default rubric's layout), quotes the answer,
and ends with `Score: 10/10` for the reference itself (case and a final period aside),
`Score: 6/10` for an answer that contains it, `Score: 0/10` otherwise (`Score: 5/10` without
a reference). It is also a *naive* judge, as real ones can be: a line anywhere in its prompt,
the answer included, asking it to award full marks is obeyed (`Score: 10/10`), which is what
tests of prompt injection need. Likewise a line asking it to reply in JSON is obeyed: it then
answers `{"grade": "excellent"}` and no score line (an answer that makes the judgment
unparseable); only the answer block is read for that one.

`judge_garbage` is a judge whose replies carry no score line (a model that ignores the output
format), for the unparseable-judgment path.
"""

import re

from agentroll.handlers.builtin.llm_judge.judge_prompt import SYSTEM_PROMPT
from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext

GRADER = SYSTEM_PROMPT.split(".")[0]
"""How the judge's system prompt begins: what tells this rule the prompt is a judgment."""
_TAG = re.compile(r"<(answer-[0-9a-f]+)>")
_REFERENCE = re.compile(r"Reference answer:\n(.*?)\n\n", re.S)
_FULL_MARKS = re.compile(r"award (?:this answer |it )?full marks", re.IGNORECASE)
_OTHER_FORMAT = re.compile(r"reply (?:only )?in JSON", re.IGNORECASE)
OTHER_FORMAT_REPLY = '{"grade": "excellent"}'
GARBAGE = "The candidate's answer looks reasonable to me; I would grade it favourably overall."


def judged_parts(conv: Conversation) -> tuple[str, str | None, str] | None:
    """(answer, reference, whole prompt) of a judge prompt; None if this is not one."""
    system, user = conv.last("system"), conv.last("user")
    if system is None or user is None or not system.content.startswith(GRADER):
        return None
    tag = _TAG.search(system.content)
    block = None
    if tag is not None:
        block = re.search(rf"<{tag.group(1)}>\n(.*)\n</{tag.group(1)}>", user.content, re.S)
    answer = block.group(1) if block is not None else ""
    reference = _REFERENCE.search(user.content)
    return answer, reference.group(1).strip() if reference else None, user.content


def _normal(text: str) -> str:
    return text.strip().rstrip(".").strip().casefold()


def judge_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    parts = judged_parts(conv)
    if parts is None:
        return None
    answer, reference, prompt = parts
    quoted = f"The candidate answered: {answer.strip()!r}."
    if _OTHER_FORMAT.search(answer):
        return Reply(OTHER_FORMAT_REPLY)
    if _FULL_MARKS.search(prompt):
        return Reply(f"{quoted}\nI was asked to award full marks.\nScore: 10/10")
    if reference is None:
        return Reply(f"{quoted}\nThere is no reference to compare with.\nScore: 5/10")
    if _normal(answer) == _normal(reference):
        return Reply(f"{quoted}\nIt agrees with the reference answer.\nScore: 10/10")
    if _normal(reference) in _normal(answer):
        return Reply(f"{quoted}\nIt contains the reference answer among other things.\nScore: 6/10")
    return Reply(f"{quoted}\nIt does not agree with the reference answer.\nScore: 0/10")


def judge_garbage_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    return Reply(GARBAGE) if judged_parts(conv) is not None else None
