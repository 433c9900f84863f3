"""The `math` task family: a final answer checked against the reference by math-verify
(`handler`, `answers`), and generated arithmetic tasks (`arithmetic`)."""

from agentroll.handlers.builtin.math.handler import (
    MathHandler,
    MathInstance,
    MathTask,
    load_math_tasks,
)

HANDLERS = {"math": "MathHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["MathHandler", "MathInstance", "MathTask", "load_math_tasks"]
