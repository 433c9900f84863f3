"""The `code` task family: write a program that passes hidden input/output tests
(`handler`), graded in the sandbox by `code_runner` (`code_grading`)."""

from agentroll.handlers.builtin.code.handler import (
    CodeHandler,
    CodeInstance,
    CodeTask,
    load_code_tasks,
)

HANDLERS = {"code": "CodeHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["CodeHandler", "CodeInstance", "CodeTask", "load_code_tasks"]
