"""The `gemini_cli` scripted rule drives Gemini CLI's own tools through a bundled SWE task,
reading the conversation as the proxy renders Gemini CLI's requests."""

import json
import random
import re
from pathlib import Path
from typing import Any

from agentroll.handlers.builtin.swe import load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import bundled_repos
from agentroll.server.proxy.google_api import parse_generate
from agentroll.testing.scripted_llm import Conversation, RuleContext, get_chat_template
from agentroll.testing.scripted_llm.generation import conversation_of
from agentroll.testing.scripted_llm.rules.gemini_cli import DONE, gemini_cli_rule

FIXTURES = Path(__file__).parents[3] / "fixtures" / "google" / "gemini_cli_0.61.0.json"
CAPTURED = json.loads(FIXTURES.read_text())
TASK = load_swe_tasks()[0]


def ctx(wrong_rate: float = 0.0) -> RuleContext:
    return RuleContext(random.Random(0), wrong_rate=wrong_rate)


def render(body: dict[str, Any]) -> Conversation:
    """The prompt the backend would see for this request, read back as the policy reads it."""
    req = parse_generate(body, "policy", stream=True, array=False)
    template = get_chat_template()
    ids = template.encode(req.messages, req.tools or None, add_generation_prompt=True)
    return conversation_of(template.tokenizer, ids)


def session(turns: list[dict[str, Any]]) -> Conversation:
    """Gemini CLI's request after `turns` (calls answered with `ok`), its tools and prompts."""
    sent = CAPTURED["main_turn_3"]["body"]
    prompt = {
        "role": "user",
        "parts": [sent["contents"][0]["parts"][0], {"text": TASK.instance["problem_statement"]}],
    }
    contents = [prompt]
    for call in turns:
        response = {"name": call["name"], "id": call["id"], "response": {"output": "ok"}}
        contents += [
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [{"functionResponse": response}]},
        ]
    return render({**sent, "contents": contents})


def play(wrong_rate: float = 0.0) -> list[str]:
    """Run the rule to its end; the reply texts."""
    turns: list[dict[str, Any]] = []
    texts = []
    for n in range(8):
        reply = gemini_cli_rule(session(turns), ctx(wrong_rate))
        assert reply is not None
        texts.append(reply.text)
        match = re.search(r"<tool_call>\n(.*)\n</tool_call>", reply.text, re.S)
        if match is None:
            break
        call = json.loads(match.group(1))
        turns.append({"id": f"call_{n}_0", "name": call["name"], "args": call["arguments"]})
    return texts


def calls(texts: list[str]) -> list[dict[str, Any]]:
    found = [re.search(r"<tool_call>\n(.*)\n</tool_call>", t, re.S) for t in texts]
    return [json.loads(m.group(1)) for m in found if m is not None]


def test_it_uses_gemini_clis_tools_then_ends_in_text() -> None:
    texts = play()
    made = calls(texts)
    assert [c["name"] for c in made] == [
        "run_shell_command", "read_file", "run_shell_command", "replace", "run_shell_command",
    ]  # fmt: skip
    assert texts[-1] == DONE
    script = TASK.script
    assert made[0]["arguments"]["command"] == script["grep"]
    assert made[1]["arguments"] == {"file_path": script["edit"]["path"]}
    assert made[4]["arguments"]["command"].startswith(script["repro"] + " && ")


def test_its_replace_is_the_reference_fix_and_applies_exactly_once() -> None:
    edit = calls(play())[3]["arguments"]
    script = TASK.script["edit"]
    assert (edit["file_path"], edit["old_string"], edit["new_string"]) == (
        script["path"], script["old"], script["new"],
    )  # fmt: skip
    original = bundled_repos()[TASK.instance["repo"]].files[script["path"]]
    assert original.count(edit["old_string"]) == 1
    wrong = calls(play(wrong_rate=1.0))[3]["arguments"]
    assert wrong["new_string"] == TASK.script["wrong_edit"]["new"]


def test_the_router_gets_a_complexity_score() -> None:
    router = CAPTURED["router"]["body"]
    body = {**router, "contents": [router["contents"][0], {"role": "user", "parts": [
        {"text": TASK.instance["problem_statement"]}]}]}  # fmt: skip
    reply = gemini_cli_rule(render(body), ctx())
    assert reply is not None
    score = json.loads(reply.text)
    assert isinstance(score["complexity_score"], int) and score["complexity_reasoning"]


def test_other_conversations_are_not_its_business() -> None:
    assert gemini_cli_rule(Conversation((), ""), ctx()) is None
    sent = CAPTURED["main_turn_3"]["body"]  # Gemini CLI, but not one of the bundled tasks
    assert gemini_cli_rule(render(sent), ctx()) is None
    router = CAPTURED["router"]["body"]
    assert gemini_cli_rule(render(router), ctx()) is None
