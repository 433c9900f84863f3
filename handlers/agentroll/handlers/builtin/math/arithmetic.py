"""Generated arithmetic tasks for the `math` handler: as many fresh questions as wanted.

`arithmetic_tasks(count, seed)` writes questions like `Compute 37 * 48 + 12.`: small
integer expressions in Python syntax, so a tool-using policy can copy the expression into
the `python` tool and submit what it prints. The same seed always gives the same tasks;
`parse_arithmetic` recovers a task (reference code and answer) from its question text, which
is how scripted policies "know" the answer of a question they have never seen.
"""

import random
import re

from agentroll.handlers.builtin.math import MathTask

OPERATORS = ("+", "-", "*")
_QUESTION = re.compile(r"Compute (\d+(?: [-+*] \d+){1,2})\.")


def _expression(rng: random.Random) -> str:
    terms = [str(rng.randint(2, 99)) for _ in range(rng.choice((2, 2, 3)))]
    out = terms[0]
    for term in terms[1:]:
        out += f" {rng.choice(OPERATORS)} {term}"
    return out


def _evaluate(expression: str) -> int:
    """The value of an expression `_QUESTION` accepts (integers, + - *, Python precedence)."""
    tokens = expression.split()
    products = [int(tokens[0])]
    signs = [1]
    for op, term in zip(tokens[1::2], tokens[2::2], strict=True):
        if op == "*":
            products[-1] *= int(term)
        else:
            products.append(int(term))
            signs.append(1 if op == "+" else -1)
    return sum(sign * value for sign, value in zip(signs, products, strict=True))


def _task(expression: str, task_id: str) -> MathTask:
    answer = str(_evaluate(expression))
    return MathTask(
        id=task_id,
        question=f"Compute {expression}.",
        answer=answer,
        solution=f"${expression} = {answer}$.\n\nThe answer is \\boxed{{{answer}}}",
        python=f"print({expression})",
    )


def arithmetic_tasks(count: int, seed: int = 0) -> tuple[MathTask, ...]:
    """`count` arithmetic tasks drawn from `seed` (duplicates possible, as in any sample)."""
    rng = random.Random(f"arithmetic-{seed}")
    return tuple(_task(_expression(rng), f"arith-{seed}-{i}") for i in range(count))


def parse_arithmetic(text: str) -> MathTask | None:
    """The arithmetic task whose question appears in `text`, if one does."""
    match = _QUESTION.search(text)
    return _task(match.group(1), "arith") if match else None
