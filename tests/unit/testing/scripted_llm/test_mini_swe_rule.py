"""The `mini_swe` scripted rule answers in mini-swe-agent's two formats, and its edit works."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.testing.scripted_llm import Conversation, RuleContext, get_chat_template
from agentroll.testing.scripted_llm.generation import conversation_of
from agentroll.testing.scripted_llm.rules.mini_swe import SUBMIT, TEXT_BLOCK, mini_swe_rule

BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
TASK = load_swe_tasks()[0]
CTX = RuleContext(random.Random(0), wrong_rate=0.0)


def conversation(turns: int, *, tools: bool) -> Conversation:
    system = "You are a helpful assistant." + ("" if tools else f" Use ```{TEXT_BLOCK} blocks.")
    messages = [
        {"role": "system", "content": system},
        {
            "role": "user",
            "content": f"Please solve this issue: {TASK.instance['problem_statement']}",
        },
    ]
    for k in range(turns):
        messages += [
            {"role": "assistant", "content": f"step {k}"},
            {"role": "user", "content": "<returncode>0</returncode>"},
        ]
    template = get_chat_template()
    ids = template.encode(messages, [BASH] if tools else None, add_generation_prompt=True)
    return conversation_of(template.tokenizer, ids)


def command_of(text: str, tools: bool) -> str:
    if tools:
        body = re.search(r"<tool_call>\n(.*)\n</tool_call>", text, re.S)
        assert body is not None
        call = json.loads(body.group(1))
        assert call["name"] == "bash"
        return str(call["arguments"]["command"])
    block = re.search(rf"```{TEXT_BLOCK}\n(.*)\n```", text, re.S)
    assert block is not None and text.startswith("THOUGHT: ")
    return block.group(1)


def test_it_speaks_both_formats_and_ends_with_the_submit_command() -> None:
    for tools in (True, False):
        commands = [
            command_of(mini_swe_rule(conversation(n, tools=tools), CTX).text, tools)
            for n in range(6)
        ]
        assert commands[0] == TASK.script["grep"]
        assert commands[-1] == SUBMIT


def test_other_conversations_are_not_its_business() -> None:
    assert mini_swe_rule(Conversation((), ""), CTX) is None


def test_the_edit_command_applies_the_reference_fix(tmp_path: Path) -> None:
    edit = TASK.script["edit"]
    repo = bundled_repos()[TASK.instance["repo"]]
    target = tmp_path / edit["path"]
    target.parent.mkdir(parents=True)
    target.write_text(repo.files[edit["path"]])
    command = command_of(mini_swe_rule(conversation(3, tools=True), CTX).text, True)
    assert command.startswith("python3 -c ")
    program = command.removeprefix("python3 -c ")
    code = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c {program}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert code.returncode == 0, code.stderr
    assert target.read_text() == repo.files[edit["path"]].replace(edit["old"], edit["new"])
