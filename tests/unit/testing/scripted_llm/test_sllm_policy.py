"""Scripted rules: math (right or wrong by seed), echo, default, and the registry."""

import random
import re

import pytest

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.testing.scripted_llm import (
    Conversation,
    DuplicateRuleError,
    PromptTurn,
    Reply,
    RuleContext,
    RuleRegistry,
    UnknownRuleError,
    default_rules,
)
from agentroll.testing.scripted_llm.policy import DEFAULT_REPLY
from agentroll.testing.scripted_llm.rules.math import UNSURE_REPLY, math_rule, wrong_answer


def conv(*turns: tuple[str, str]) -> Conversation:
    return Conversation(tuple(PromptTurn(role, text) for role, text in turns), "")


def ctx(seed: int = 0, wrong_rate: float = 0.0) -> RuleContext:
    return RuleContext(random.Random(seed), wrong_rate)


def boxed(text: str) -> str:
    found = re.findall(r"\\boxed\{(.*)\}", text)
    assert found, text
    return found[-1]


def test_math_tasks_file_is_complete_and_varied() -> None:
    tasks = load_math_tasks()
    assert [t.id for t in tasks] == [f"math-{i:03d}" for i in range(1, 21)]
    assert len({t.question for t in tasks}) == 20
    for t in tasks:
        assert t.solution.endswith(f"\\boxed{{{t.answer}}}"), t.id
    kinds = {
        "int": sum(bool(re.fullmatch(r"\d+", t.answer)) for t in tasks),
        "frac": sum(t.answer.startswith("\\frac") for t in tasks),
        "decimal": sum(bool(re.fullmatch(r"\d+\.\d+", t.answer)) for t in tasks),
        "expr": sum("\\sqrt" in t.answer or "\\pi" in t.answer for t in tasks),
    }
    assert all(n >= 2 for n in kinds.values()), kinds


def test_math_verify_accepts_every_solution_and_rejects_wrong_answers() -> None:
    math_verify = pytest.importorskip("math_verify")
    for t in load_math_tasks():
        gold = math_verify.parse(f"${t.answer}$")
        assert math_verify.verify(gold, math_verify.parse(t.solution)), t.id
        wrong = math_verify.parse(f"$\\boxed{{{wrong_answer(t.answer)}}}$")
        assert not math_verify.verify(gold, wrong), t.id


def test_math_answers_a_known_question_with_the_worked_solution() -> None:
    task = load_math_tasks()[4]
    prompt = f"Solve this.\n{task.question}\nPut your final answer in \\boxed{{}}."
    reply = math_rule(conv(("user", prompt)), ctx())
    assert reply == Reply(task.solution)


def test_math_is_wrong_at_the_configured_rate_decided_by_seed() -> None:
    task = load_math_tasks()[2]
    outcomes = [
        boxed(math_rule(conv(("user", task.question)), ctx(seed, 0.3)).text) == task.answer
        for seed in range(300)
    ]
    wrong = outcomes.count(False) / len(outcomes)
    assert 0.2 < wrong < 0.4
    assert set(outcomes) == {True, False}
    # the same seed always decides the same way
    again = [
        boxed(math_rule(conv(("user", task.question)), ctx(seed, 0.3)).text) == task.answer
        for seed in range(300)
    ]
    assert again == outcomes
    always_wrong = math_rule(conv(("user", task.question)), ctx(1, 1.0)).text
    assert boxed(always_wrong) == wrong_answer(task.answer) != task.answer


def test_follow_up_gets_only_the_boxed_answer() -> None:
    task = load_math_tasks()[0]
    c = conv(
        ("user", task.question),
        ("assistant", "Let me think."),
        ("user", "Please put your final answer in \\boxed{}."),
    )
    assert math_rule(c, ctx()).text == f"\\boxed{{{task.answer}}}"


def test_unknown_question_is_unsure() -> None:
    assert math_rule(conv(("user", "What is the airspeed of a swallow?")), ctx()).text == (
        UNSURE_REPLY
    )


def test_wrong_answer_keeps_the_form() -> None:
    assert wrong_answer("210") == "211"
    assert wrong_answer("0.875") == "1.875"
    assert wrong_answer("\\frac{11}{12}") == "\\frac{11}{13}"
    assert wrong_answer("2\\sqrt{2}") == "2\\sqrt{2}+1"


def test_echo_then_default_chain() -> None:
    policy = default_rules().chain(["echo"])
    assert policy.reply(conv(("user", "Repeat after me: the quick fox")), ctx()).text == (
        "the quick fox"
    )
    assert policy.reply(conv(("user", "Hello?")), ctx()).text == DEFAULT_REPLY


def test_registry_rejects_duplicates_and_names_known_rules() -> None:
    registry = default_rules()
    with pytest.raises(DuplicateRuleError):
        registry.register("echo", lambda c, x: None)
    with pytest.raises(
        UnknownRuleError,
        match="known rules: calculator, claude_code, code, codex, compaction, default, echo, "
        "gemini_cli, guess, judge, judge_garbage, math, mini_swe, notes, opencode, openenv_guess, "
        "openenv_mcp_guess, openreward_guess, "
        "qwen_code, redteam, "
        "redteam_budgets, "
        "redteam_codegrade, stem, "
        "swe, verify",
    ):
        registry.chain(["nope"])


def test_custom_rules_by_registration_or_import_path() -> None:
    registry = RuleRegistry()
    registry.register("default", lambda c, x: Reply("fallback"))
    registry.register("shout", lambda c, x: Reply(c.messages[-1].content.upper()))
    assert registry.chain(["shout"]).reply(conv(("user", "hi")), ctx()).text == "HI"
    by_path = registry.chain(["agentroll.testing.scripted_llm.policy:echo_rule"])
    assert by_path.reply(conv(("user", "Repeat after me: x")), ctx()).text == "x"
    with pytest.raises(UnknownRuleError, match="has no attribute 'missing'"):
        registry.get("agentroll.testing.scripted_llm.policy:missing")
