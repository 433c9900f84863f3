"""The `codex` scripted rule drives Codex CLI's own tools through a bundled SWE task."""

import json
import random
import re
from typing import Any

import pytest

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.testing.scripted_llm import Conversation, RuleContext, get_chat_template
from agentroll.testing.scripted_llm.generation import conversation_of
from agentroll.testing.scripted_llm.rules.codex import DONE, codex_rule, patch_text

TASK = load_swe_tasks()[0]


def tool(name: str, **properties: Any) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


SHELL = tool("exec_command", cmd={"type": "string"})
WRITE_STDIN = tool("write_stdin", chars={"type": "string"})
PATCH_TOOL = tool("apply_patch", input={"type": "string"})


def conversation(turns: int, tools: list[dict[str, Any]], task: str | None = None) -> Conversation:
    """Codex's conversation after `turns` turns: developer prompt, environment context, task."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent running in the Codex CLI."},
        {"role": "user", "content": "<environment_context>\n  <cwd>/testbed</cwd>"},
        {"role": "user", "content": task or TASK.instance["problem_statement"]},
    ]
    for k in range(turns):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "x", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": "Process exited with code 0"},
        ]
    template = get_chat_template()
    ids = template.encode(messages, tools, add_generation_prompt=True)
    return conversation_of(template.tokenizer, ids)


def reply_calls(text: str) -> list[dict[str, Any]]:
    return [json.loads(b) for b in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)]


def session(tools: list[dict[str, Any]], wrong_rate: float = 0.0) -> list[str]:
    ctx = RuleContext(random.Random(0), wrong_rate=wrong_rate)
    texts = []
    for n in range(6):
        reply = codex_rule(conversation(n, tools), ctx)
        assert reply is not None
        texts.append(reply.text)
    return texts


def test_it_works_through_the_shell_and_patches_with_the_intercepted_apply_patch() -> None:
    texts = session([SHELL, WRITE_STDIN])
    calls = [reply_calls(t) for t in texts]
    assert all(len(c) == 1 and c[0]["name"] == "exec_command" for c in calls[:5])
    commands = [c[0]["arguments"]["cmd"] for c in calls[:5]]
    assert commands[0] == TASK.script["grep"]
    assert commands[1] == f"nl -ba {TASK.script['edit']['path']}"
    assert commands[2] == TASK.script["repro"]
    assert commands[3] == f"apply_patch <<'EOF'\n{patch_text(TASK.script['edit'])}EOF"
    assert commands[4].startswith(TASK.script["repro"] + " && python -m pytest")
    # The last turn calls nothing: that is how Codex knows the task is done.
    assert texts[5] == DONE and reply_calls(texts[5]) == []


def test_it_uses_codexs_own_apply_patch_tool_when_offered() -> None:
    calls = reply_calls(session([SHELL, PATCH_TOOL])[3])
    assert calls == [
        {"name": "apply_patch", "arguments": {"input": patch_text(TASK.script["edit"])}}
    ]


def test_with_wrong_rate_one_it_patches_in_the_plausible_wrong_fix() -> None:
    calls = reply_calls(session([SHELL], wrong_rate=1.0)[3])
    assert patch_text(TASK.script["wrong_edit"]) in calls[0]["arguments"]["cmd"]


def test_other_conversations_are_not_its_business() -> None:
    ctx = RuleContext(random.Random(0), wrong_rate=0.0)
    assert codex_rule(Conversation((), ""), ctx) is None
    assert codex_rule(conversation(0, [tool("bash", command={"type": "string"})]), ctx) is None
    assert codex_rule(conversation(0, [SHELL], task="Write me a poem."), ctx) is None


@pytest.mark.parametrize("task", load_swe_tasks(), ids=lambda t: t.id)
@pytest.mark.parametrize("which", ["edit", "wrong_edit"])
def test_every_bundled_edit_is_a_patch_of_whole_lines_found_once(task: Any, which: str) -> None:
    edit = task.script[which]
    patch = patch_text(edit)
    header = f"*** Begin Patch\n*** Update File: {edit['path']}\n@@\n"
    assert patch.startswith(header) and patch.endswith("*** End Patch\n")
    body = patch[len(header) : -len("*** End Patch\n")].splitlines(keepends=True)
    old = "".join(line[1:] for line in body if line.startswith("-"))
    new = "".join(line[1:] for line in body if line.startswith("+"))
    assert all(line[0] in "-+" for line in body)
    source = bundled_repos()[task.instance["repo"]].files[edit["path"]]
    assert (old, new) == (edit["old"], edit["new"]) and source.count(old) == 1


def test_a_patch_must_replace_whole_lines() -> None:
    with pytest.raises(ValueError, match="whole lines"):
        patch_text({"path": "a.py", "old": "x = 1", "new": "x = 2"})
