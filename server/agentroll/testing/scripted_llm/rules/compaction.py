"""The `compaction` rule, and the scripted harness it answers: an agent loop that makes a side
call and compacts its context, so a run through the recording proxy has several chains.

`COMPACTING_HARNESS` is a harness program on Python's standard library, for the `shell`
preset (`{"type": "shell", "command": ["python3", "-c", COMPACTING_HARNESS, *turns]}`). Each
argument is one turn of its loop: `X` sends `Repeat after me: X` (the `echo` rule answers
X), and `COMPACT` compacts the way Claude Code's and Codex's compaction does: it asks the
model for a summary inside the conversation so far (one more turn of the same chain), then
starts over from the system prompt and the summary (a new chain: the loop's continuation).
After the loop's first turn it asks for a title for the task, in a conversation of its own
(a side call), as OpenCode does.

The rule answers the title request with `TITLE` and the summary request with every earlier
reply of the conversation, in order; it leaves anything else to the next rule (put it before
`echo`: `policy="compaction,echo"`).
"""

from agentroll.testing.scripted_llm.policy import Conversation, Reply, RuleContext

COMPACT = "/compact"
TITLE_REQUEST = "Write a short title for this task:"
TITLE = "Repeating after the user"
SUMMARY_REQUEST = "Summarise the conversation so far, for a fresh context."
SUMMARY_PREFIX = "Summary of the conversation so far:"

COMPACTING_HARNESS = f"""
import json, os, sys, urllib.request
BASE, KEY = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
def chat(messages):
    body = {{"model": os.environ["OPENAI_MODEL"], "messages": messages}}
    req = urllib.request.Request(BASE + "/chat/completions", json.dumps(body).encode(),
        {{"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}})
    with urllib.request.urlopen(req, timeout=120) as resp:
        content = json.load(resp)["choices"][0]["message"]["content"]
    return {{"role": "assistant", "content": content}}
def user(text):
    return {{"role": "user", "content": text}}
SYSTEM = {{"role": "system", "content": "You repeat things."}}
history = [SYSTEM]
for turn, text in enumerate(sys.argv[1:]):
    if text == {COMPACT!r}:
        summary = chat(history + [user({SUMMARY_REQUEST!r})])["content"]
        history = [SYSTEM, user({SUMMARY_PREFIX!r} + " " + summary)]
        continue
    history.append(user("Repeat after me: " + text))
    history.append(chat(history))
    if turn == 0:
        task = os.environ["AGENTROLL_INSTRUCTION"]
        chat([{{"role": "system", "content": "You name tasks."}},
              user({TITLE_REQUEST!r} + " " + task)])
print(history[-1]["content"])
"""


def compaction_rule(conv: Conversation, ctx: RuleContext) -> Reply | None:
    """The title and the summary `COMPACTING_HARNESS` asks for (module docstring)."""
    user = conv.last("user")
    if user is None:
        return None
    if user.content.startswith(TITLE_REQUEST):
        return Reply(TITLE)
    if user.content == SUMMARY_REQUEST:
        said = " ".join(m.content for m in conv.of_role("assistant"))
        return Reply(f"I repeated: {said}")
    return None
