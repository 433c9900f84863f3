"""`code`: write a function or program; hidden unit tests decide the reward.

Task instance:

    {"prompt": "Write a function `f(x)` in `solution.py` that ...",
     "tests": ["assert f(1) == 2", {"stdin": "1 2\\n", "stdout": "3"}],
     "solution_file": "solution.py",     # optional, default solution.py
     "test_timeout_s": 10,               # optional, per test
     "agent": {...}}                     # optional AgentConfig overrides

A string test is Python that calls the solution's public functions and checks what they
return; an object test runs the file as a program on `stdin` and compares its output. The
tests are hidden: they are never in the prompt, and they never reach the agent's sandbox.

EVAL reads the solution file from the RUN sandbox (at most 1 MiB; missing, too large or
unreadable is reward 0 with `reason: "no_solution"`), then grades it in a fresh sandbox of
its own, so nothing the agent left running can touch the grading. There a small runner
(`code_runner.py`, started from its source in isolated mode: no file of it sits beside the
solution) gets the tests on stdin and runs each under its time limit. A string test runs in
a grader process, not in the solution's: each call reaches the solution's own process and
only plain data (builtin types, checked by exact type) comes back, so no object of the
solution (a lying `__eq__`, `__bool__`, `__len__`...) takes part in a comparison, and a
result that is not plain data fails the test. The runner's results count only on lines
carrying a token it got on stdin.

Reward: 1.0 if every test passes; `reward_info` has `passed`, `total`, `pass_fraction` and
one entry per test (plus `reason` and `detail` when grading could not run the tests). A
runner that cannot start is `infra_error`; a solution that fails, hangs, crashes, or stops
the runner once it has started (`reason: "grading_disrupted"`) is reward 0. A grading
sandbox that dies is graded over in a new one (`code_grading` says whose fault it is then).
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import ToolAgentHandler
from agentroll.handlers.agents import AgentResult
from agentroll.handlers.builtin.code import code_grading
from agentroll.handlers.builtin.sandbox_files import UnreadableFile, read_text
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError

SYSTEM_PROMPT = (
    "You are an expert Python programmer working in a sandbox. Write the requested code to the "
    "named file with the editor, check it with bash, and call submit when it is done."
)
MAX_SOLUTION_BYTES = 1 << 20


class IOTest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stdin: str = ""
    stdout: str


class CodeInstance(BaseModel):
    model_config = ConfigDict(extra="allow")

    prompt: str = Field(..., min_length=1, max_length=100_000)
    tests: list[str | IOTest] = Field(..., min_length=1, max_length=1000)
    solution_file: str = Field("solution.py", pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.py$")
    test_timeout_s: float = Field(10.0, gt=0, le=600)
    agent: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CodeTask:
    id: str
    prompt: str
    tests: tuple[Any, ...]
    solution: str
    """A reference solution (never shown to the policy; scripted backends use it)."""
    wrong_solution: str
    """A plausible solution that fails some hidden tests (scripted failures)."""
    try_cmd: str
    """A shell command that tries the solution on the prompt's example."""

    def instance(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "tests": list(self.tests)}


@cache
def load_code_tasks() -> tuple[CodeTask, ...]:
    """The bundled task set (`data/code_tasks.jsonl`)."""
    data = resources.files("agentroll.handlers.builtin.code").joinpath("data/code_tasks.jsonl")
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines() if line.strip()]
    return tuple(CodeTask(**{**row, "tests": tuple(row["tests"])}) for row in rows)


class CodeHandler(ToolAgentHandler):
    name = "code"
    instance_model = CodeInstance
    system_prompt = SYSTEM_PROMPT
    default_tools = ("bash", "str_replace_editor", "python", "submit")
    # EVAL reads the solution from the RUN sandbox, then grades it in a fresh one of its own.
    eval_sandbox = "reuse"

    def task_prompt(self, ctx: RolloutContext) -> str:
        spec = self.sandbox_spec(ctx)
        file = ctx.instance.get("solution_file", "solution.py")
        return (
            f"{ctx.instance['prompt']}\n\nWrite your solution to `{file}` in the working "
            f"directory ({spec.workdir}). Test it yourself with bash, then call submit."
        )

    async def grade(self, ctx: RolloutContext, result: AgentResult) -> Reward:
        if ctx.sandbox is None:
            raise InfraError("the RUN sandbox is gone; cannot grade", cause="no_sandbox")
        instance = CodeInstance.model_validate(dict(ctx.instance))
        tests = [t if isinstance(t, str) else t.model_dump() for t in instance.tests]
        solution = f"{ctx.sandbox.spec.workdir}/{instance.solution_file}"
        try:
            source = await read_text(ctx.sandbox, solution, max_bytes=MAX_SOLUTION_BYTES)
        except UnreadableFile as exc:
            return code_grading.scored([], len(tests), reason="no_solution", detail=str(exc))
        # From here on the agent's sandbox, and whatever it left running there, is out of it.
        return await code_grading.grade(
            lambda: ctx.open_sandbox(self.sandbox_spec(ctx)),
            source,
            instance.solution_file,
            tests,
            instance.test_timeout_s,
        )
