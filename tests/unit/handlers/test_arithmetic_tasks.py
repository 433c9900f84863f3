"""Generated arithmetic tasks: reproducible, right, and known to the scripted math rule."""

import ast
import operator

from agentroll.handlers.builtin.math.arithmetic import arithmetic_tasks, parse_arithmetic
from agentroll.testing.scripted_llm.rules.math import find_math_task

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _value(node: ast.expr) -> int:
    """Python's own reading of the expression (precedence included), without eval."""
    if isinstance(node, ast.BinOp):
        return OPS[type(node.op)](_value(node.left), _value(node.right))
    assert isinstance(node, ast.Constant) and isinstance(node.value, int)
    return node.value


def test_the_same_seed_gives_the_same_tasks_and_another_seed_others() -> None:
    assert arithmetic_tasks(50, seed=3) == arithmetic_tasks(50, seed=3)
    questions = {t.question for t in arithmetic_tasks(50, seed=3)}
    assert len(questions & {t.question for t in arithmetic_tasks(50, seed=4)}) < 5


def test_each_answer_is_what_python_computes_and_the_reference_code_prints_it() -> None:
    tasks = arithmetic_tasks(200, seed=0)
    assert {"*", "+", "-"} <= {c for t in tasks for c in t.question}
    for t in tasks:
        expression = t.question.removeprefix("Compute ").removesuffix(".")
        assert t.answer == str(_value(ast.parse(expression, mode="eval").body))
        assert t.python == f"print({expression})"


def test_a_question_is_recognised_inside_a_prompt_and_by_the_scripted_policy() -> None:
    task = arithmetic_tasks(1, seed=9)[0]
    found = parse_arithmetic(f"Please help.\n{task.question}\nThanks")
    assert found is not None and (found.answer, found.python) == (task.answer, task.python)
    scripted = find_math_task(task.question)
    assert scripted is not None and scripted.answer == task.answer
    assert parse_arithmetic("Compute the sum of 3 and 4.") is None
