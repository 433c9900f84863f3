"""The `opencode` and `qwen_code` scripted rules: each drives its CLI with that CLI's own
tools, on the conversations the CLI really sends (tools and task shape from the captured
requests in `tests/fixtures/openai_chat/`)."""

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.testing.scripted_llm import Conversation, Reply, RuleContext, get_chat_template
from agentroll.testing.scripted_llm.generation import conversation_of
from agentroll.testing.scripted_llm.rules.chat_clis import DONE, opencode_rule, qwen_code_rule
from agentroll.testing.scripted_llm.rules.swe import PYTEST

FIXTURES = Path(__file__).parents[3] / "fixtures" / "openai_chat"
TASK = load_swe_tasks()[0]
SCRIPT = TASK.script


def captured(name: str, request: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text())[request]["body"])


OPENCODE = captured("opencode_1.18.33.json", "main_turn_7")
QWEN = captured("qwen_code_0.24.4.json", "main_turn_4")


def conversation(body: dict[str, Any], turns: int) -> Conversation:
    """The CLI's system prompt and tools, the task as it states it, `turns` finished turns."""
    task = TASK.instance["problem_statement"]
    parts = body["messages"][1]["content"]  # Qwen Code's: system reminders, the instruction
    first = [*parts[:-1], {"type": "text", "text": task}] if isinstance(parts, list) else task
    messages = [body["messages"][0], {"role": "user", "content": first}]
    for k in range(turns):
        messages += [
            {"role": "assistant", "content": f"step {k}"},
            {"role": "user", "content": "ok"},
        ]
    template = get_chat_template()
    ids = template.encode(messages, body.get("tools"), add_generation_prompt=True)
    return conversation_of(template.tokenizer, ids)


def tool_call(reply: Reply) -> tuple[str, dict[str, Any]]:
    found = re.search(r"<tool_call>\n(.*)\n</tool_call>", reply.text, re.S)
    assert found is not None, reply.text
    call = json.loads(found.group(1))
    return call["name"], call["arguments"]


def session(rule: Any, body: dict[str, Any], wrong_rate: float = 0.0) -> list[Reply]:
    ctx = RuleContext(random.Random(0), wrong_rate)
    replies = [rule(conversation(body, n), ctx) for n in range(6)]
    assert all(isinstance(r, Reply) for r in replies)
    return replies


def test_opencode_is_driven_with_its_own_tools() -> None:
    *calls, last = session(opencode_rule, OPENCODE)
    path = f"/testbed/{SCRIPT['edit']['path']}"
    assert [tool_call(r) for r in calls] == [
        ("bash", {"command": SCRIPT["grep"]}),
        ("read", {"filePath": path}),
        ("bash", {"command": SCRIPT["repro"]}),
        (
            "edit",
            {
                "filePath": path,
                "oldString": SCRIPT["edit"]["old"],
                "newString": SCRIPT["edit"]["new"],
            },
        ),
        ("bash", {"command": f"{SCRIPT['repro']} && {PYTEST}"}),
    ]
    assert last.text == DONE and "<tool_call>" not in last.text


def test_qwen_code_is_driven_with_its_own_tools() -> None:
    *calls, last = session(qwen_code_rule, QWEN)
    path = f"/testbed/{SCRIPT['edit']['path']}"
    assert [name for name, _ in map(tool_call, calls)] == [
        "run_shell_command", "read_file", "run_shell_command", "edit", "run_shell_command",
    ]  # fmt: skip
    assert tool_call(calls[1])[1] == {"file_path": path}
    assert tool_call(calls[3])[1] == {
        "file_path": path,
        "old_string": SCRIPT["edit"]["old"],
        "new_string": SCRIPT["edit"]["new"],
    }
    assert last.text == DONE


@pytest.mark.parametrize(("rule", "body"), [(opencode_rule, OPENCODE), (qwen_code_rule, QWEN)])
def test_a_wrong_rate_of_one_makes_the_plausible_wrong_edit(rule: Any, body: Any) -> None:
    edit = tool_call(session(rule, body, wrong_rate=1.0)[3])[1]
    assert SCRIPT["wrong_edit"]["new"] in edit.values()
    assert SCRIPT["edit"]["new"] not in edit.values()


def test_each_rule_leaves_the_other_clis_and_the_title_call_alone() -> None:
    ctx = RuleContext(random.Random(0), 0.0)
    assert opencode_rule(conversation(QWEN, 0), ctx) is None
    assert qwen_code_rule(conversation(OPENCODE, 0), ctx) is None
    title = captured("opencode_1.18.33.json", "title")  # no tools offered
    assert opencode_rule(conversation(title, 0), ctx) is None
    unknown = dict(OPENCODE, messages=[OPENCODE["messages"][0], {"role": "user", "content": "Hi"}])
    template = get_chat_template()
    ids = template.encode(unknown["messages"], unknown["tools"], add_generation_prompt=True)
    assert opencode_rule(conversation_of(template.tokenizer, ids), ctx) is None


def test_the_edit_is_the_reference_fix_of_the_bundled_file() -> None:
    edit = tool_call(session(opencode_rule, OPENCODE)[3])[1]
    source = bundled_repos()[TASK.instance["repo"]].files[SCRIPT["edit"]["path"]]
    assert source.count(edit["oldString"]) == 1
    assert edit["newString"] in source.replace(edit["oldString"], edit["newString"])
