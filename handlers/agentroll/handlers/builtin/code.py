"""`code`: write a function or program; hidden unit tests decide the reward.

Task instance:

    {"prompt": "Write a function `f(x)` in `solution.py` that ...",
     "tests": ["assert f(1) == 2", {"stdin": "1 2\\n", "stdout": "3"}],
     "solution_file": "solution.py",     # optional, default solution.py
     "test_timeout_s": 10,               # optional, per test
     "agent": {...}}                     # optional AgentConfig overrides

A string test is Python run after `from solution import *` (passes if it exits 0); an object
test runs the file as a program on `stdin` and compares its output. The tests are hidden:
they are never in the prompt, and they reach the sandbox only at EVAL (after the agent is
done), together with a small runner (`code_runner.py`) that runs each test in its own process
under its time limit. Reward: 1.0 if every test passes; `reward_info` has `passed`, `total`,
`pass_fraction` and one entry per test. A runner that cannot run is `infra_error`; a
solution that fails, hangs or crashes is reward 0.
"""

import json
import secrets
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentroll.handlers.agent import ToolAgentHandler
from agentroll.handlers.context import Reward, RolloutContext
from agentroll.handlers.errors import InfraError

SYSTEM_PROMPT = (
    "You are an expert Python programmer working in a sandbox. Write the requested code to the "
    "named file with the editor, check it with bash, and call submit when it is done."
)
RUNNER_SLACK_S = 30.0


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
    data = resources.files("agentroll.handlers.builtin").joinpath("data/code_tasks.jsonl")
    rows = [json.loads(line) for line in data.read_text("utf-8").splitlines() if line.strip()]
    return tuple(CodeTask(**{**row, "tests": tuple(row["tests"])}) for row in rows)


@cache
def runner_source() -> bytes:
    return resources.files("agentroll.handlers.builtin").joinpath("code_runner.py").read_bytes()


class CodeHandler(ToolAgentHandler):
    name = "code"
    instance_model = CodeInstance
    system_prompt = SYSTEM_PROMPT
    default_tools = ("bash", "str_replace_editor", "python", "submit")

    def task_prompt(self, ctx: RolloutContext) -> str:
        spec = self.sandbox_spec(ctx)
        file = ctx.instance.get("solution_file", "solution.py")
        return (
            f"{ctx.instance['prompt']}\n\nWrite your solution to `{file}` in the working "
            f"directory ({spec.workdir}). Test it yourself with bash, then call submit."
        )

    async def eval(self, ctx: RolloutContext) -> Reward:
        sandbox = ctx.sandbox
        if sandbox is None:
            raise InfraError("the RUN sandbox is gone; cannot grade", cause="no_sandbox")
        instance = CodeInstance.model_validate(dict(ctx.instance))
        tests = [t if isinstance(t, str) else t.model_dump() for t in instance.tests]
        # A fresh, unguessable folder: the tests exist in the sandbox only from now on.
        folder = f"/tmp/agentroll-eval-{secrets.token_hex(6)}"
        spec = {
            "solution_file": instance.solution_file,
            "timeout_s": instance.test_timeout_s,
            "tests": tests,
        }
        await sandbox.upload(f"{folder}/runner.py", runner_source())
        await sandbox.upload(f"{folder}/spec.json", json.dumps(spec).encode())
        limit = len(tests) * (instance.test_timeout_s + 1) + RUNNER_SLACK_S
        done = await sandbox.exec(
            ["python3", f"{folder}/runner.py", f"{folder}/spec.json"], timeout=limit
        )
        try:
            if done.exit_code != 0 or done.timed_out:
                raise ValueError(f"exit code {done.exit_code}")
            results = json.loads(done.stdout)["results"]
            if len(results) != len(tests):
                raise ValueError(f"{len(results)} results for {len(tests)} tests")
        except (ValueError, KeyError, TypeError) as exc:
            raise InfraError(
                f"hidden-test runner failed ({exc}): {done.stderr.strip()[-500:]}",
                cause="test_runner_failed",
            ) from exc
        passed = sum(1 for r in results if r["passed"])
        info = {
            "passed": passed,
            "total": len(tests),
            "pass_fraction": passed / len(tests),
            "tests": results,
        }
        return Reward(1.0 if passed == len(tests) else 0.0, info)
