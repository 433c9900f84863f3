"""The `claude_code` scripted rule drives Claude Code's own tools through a bundled SWE task.

The conversation is built from a request Claude Code really sent (the fixture), its task
replaced by a bundled issue, then rendered and read back as the scripted backend does."""

import json
import random
import re
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.server.proxy.anthropic_api import parse_messages
from agentroll.testing.scripted_llm import Conversation, RuleContext, get_chat_template
from agentroll.testing.scripted_llm.generation import conversation_of
from agentroll.testing.scripted_llm.rules.claude_code import DONE, claude_code_rule
from agentroll.testing.scripted_llm.rules.swe import PYTEST

FIXTURE = Path(__file__).parents[3] / "fixtures" / "claude_code" / "requests.json"
TASK = load_swe_tasks()[0]
WORKDIR = "/tmp/anth-explore/e5/work"  # where Claude Code ran when the fixture was captured


def claude_code_start() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Claude Code's first request (system, user turn, environment) with a bundled issue."""
    body = json.loads(FIXTURE.read_text())[0]["body"]
    body["messages"][0]["content"][-1]["text"] = TASK.instance["problem_statement"]
    request = parse_messages(body)
    return request.messages, request.tools


def conversation(turns: int, tools: list[dict[str, Any]] | None = None) -> Conversation:
    messages, offered = claude_code_start()
    for k in range(turns):
        call = {"id": f"call_{k}_0", "type": "function"}
        call["function"] = {"name": "Bash", "arguments": "{}"}
        messages += [
            {"role": "assistant", "content": f"step {k}", "tool_calls": [call]},
            {"role": "tool", "content": "ok", "tool_call_id": f"call_{k}_0"},
        ]
    template = get_chat_template()
    ids = template.encode(messages, offered if tools is None else tools, add_generation_prompt=True)
    return conversation_of(template.tokenizer, ids)


def action(text: str) -> tuple[str, dict[str, Any]] | None:
    found = re.search(r"<tool_call>\n(.*)\n</tool_call>", text, re.S)
    if found is None:
        return None
    call = json.loads(found.group(1))
    return call["name"], call["arguments"]


def session(wrong_rate: float) -> list[tuple[str, dict[str, Any]] | None]:
    ctx = RuleContext(random.Random(0), wrong_rate=wrong_rate)
    replies = [claude_code_rule(conversation(n), ctx) for n in range(6)]
    assert all(r is not None for r in replies)
    return [action(r.text) for r in replies if r is not None]


def test_it_locates_reads_reproduces_edits_checks_and_answers() -> None:
    script, path = TASK.script, f"{WORKDIR}/{TASK.script['edit']['path']}"
    steps = session(wrong_rate=0.0)
    assert [s[0] if s else None for s in steps] == ["Bash", "Read", "Bash", "Edit", "Bash", None]
    assert steps[0] is not None and steps[0][1]["command"] == script["grep"]
    assert steps[1] == ("Read", {"file_path": path})  # Claude Code's file tools want it absolute
    assert steps[2] is not None and steps[2][1]["command"] == script["repro"]
    edit = script["edit"]
    assert steps[3] == (
        "Edit",
        {"new_string": edit["new"], "old_string": edit["old"], "file_path": path},
    )
    assert steps[4] is not None and steps[4][1]["command"] == f"{script['repro']} && {PYTEST}"
    last = claude_code_rule(conversation(5), RuleContext(random.Random(0), wrong_rate=0.0))
    assert last is not None and last.text == DONE
    # Claude Code's Edit replaces a string found exactly once (replace_all is off).
    original = bundled_repos()[TASK.instance["repo"]].files[edit["path"]]
    assert original.count(edit["old"]) == 1


def test_a_wrong_rate_of_one_makes_the_plausible_wrong_edit() -> None:
    wrong = TASK.script["wrong_edit"]
    edit = session(wrong_rate=1.0)[3]
    assert edit is not None and edit[1]["new_string"] == wrong["new"]
    assert wrong["new"] != TASK.script["edit"]["new"]


def test_other_conversations_are_not_its_business() -> None:
    ctx = RuleContext(random.Random(0), wrong_rate=0.0)
    assert claude_code_rule(Conversation((), ""), ctx) is None
    _, tools = claude_code_start()
    without_edit = [t for t in tools if t["function"]["name"] != "Edit"]
    assert claude_code_rule(conversation(0, tools=without_edit), ctx) is None
