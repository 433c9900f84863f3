"""`notes`: plays the notes taskset of `tests/fixtures/verifiers_sandbox_pkg`. Where
`notes_write` is offered and the task says `read it back: <WORD>`, it calls in turn
`notes_read` (is a note there already?), `notes_write` with the word, `notes_read` again,
`probe_look` on where the note is kept (`/app/note.txt`), `notes_start` (a keeper process) and
`notes_keeper` (does it still run?), then answers with what the second read answered, or
`I could not keep it.` where no note was there."""

import re

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext
from agentroll.testing.scripted_llm.rules.steps import call, offered_tools, task_text

WORD = re.compile(r"read it back: <([^>]*)>")
NOTE_PATH = "/app/note.txt"
NO_NOTE = "(no note)"


def notes_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    word = WORD.search(task_text(conv))
    if word is None or "notes_write" not in offered_tools(conv):
        return None
    steps = [
        call("notes_read", {}, "Is there a note already?"),
        call("notes_write", {"text": word.group(1)}, "Let me keep the word."),
        call("notes_read", {}, "Let me read it back."),
        call("probe_look", {"path": NOTE_PATH}, "Where is it kept?"),
        call("notes_start", {}, "Let me start its keeper."),
        call("notes_keeper", {}, "Does the keeper still run?"),
    ]
    answers = [m.content.strip() for m in conv.of_role("tool")]
    if len(answers) < len(steps):
        return steps[len(answers)]
    return Reply(answers[2] if answers[2] != NO_NOTE else "I could not keep it.")
