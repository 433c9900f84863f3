"""A guessing game and a one-question quiz as Open Reward Standard environments, served by
openreward's own environment server (`openreward.environments.Server`).

Run in the openreward environment (`server.py`), never imported by agentroll:
`python -m uvicorn guess_env:app`.

`guessgame`, task spec `{"target": 1-10}`: the tool `guess` (`{"number": n}`, 1 to 10: its
input model refuses anything else) answers `higher` or `lower` (reward 0.0) or `correct`
(reward 1.0, finished). Flags of the task spec make it misbehave:
- `"broken_reward": "on_correct"`: the correct guess finishes with reward NaN (sent as `null`,
  which is how pydantic writes NaN); `"always"`: every guess does;
- `"raise_on_guess": true`: the tool raises;
- `"step_reward": r`: each `higher` / `lower` answer's reward (default 0.0), a penalty if < 0;
- `"fail_above": n` with `"failure"` `"raise"`, `"sleep"` or `"huge"`: a guess above n (the
  policy's choice) raises, sleeps `"sleep_s"` (default 600) or answers 17 MiB of text;
- `"crash_on_guess": true`: the server's process dies at the first guess (connections drop);
- `"raise_on_prompt": true`: reading the prompt raises (the server answers HTTP 500).

`quiz`, task spec `{"question": ..., "answer": ...}`: no tool the model sees, only a
`@terminal` tool `answer`: the model's plain reply is graded (1.0 if it is the answer). With
`"numeric": true` it is graded as a number the way a careless grader does (`int(answer)`: a
reply that is not one raises), an empty reply simply wrong.
"""

import asyncio
import math
import os

from openreward.environments import Environment, Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field


class Guess(BaseModel):
    number: int = Field(..., ge=1, le=10, description="Your guess, 1 to 10.")


class Answer(BaseModel):
    answer: str


class GuessGame(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, int]]:
        return [{"target": n} for n in range(1, 11)]

    def get_prompt(self) -> list[TextBlock]:
        if self.task_spec.get("raise_on_prompt"):
            raise RuntimeError("the guessing game has no prompt")
        return [TextBlock(text="Guess the number from 1 to 10 with the guess tool.")]

    @tool
    async def guess(self, params: Guess) -> ToolOutput:
        """Guess the number."""
        spec = self.task_spec
        if spec.get("crash_on_guess"):
            os._exit(1)
        if spec.get("raise_on_guess"):
            raise RuntimeError("the guessing game's tool is broken")
        if params.number > spec.get("fail_above", 10):
            failure = spec.get("failure")
            if failure == "raise":
                raise ValueError(f"the game cannot take {params.number}")
            if failure == "sleep":
                await asyncio.sleep(float(spec.get("sleep_s", 600)))
            if failure == "huge":
                return ToolOutput(blocks=[TextBlock(text="x" * (17 << 20))], reward=0.0)
        target = int(spec["target"])
        broken = spec.get("broken_reward")
        if params.number == target or broken == "always":
            correct = params.number == target
            reward = math.nan if broken in ("always", "on_correct") else 1.0
            text = "correct" if correct else "wrong"
            return ToolOutput(blocks=[TextBlock(text=text)], reward=reward, finished=True)
        feedback = "higher" if params.number < target else "lower"
        step_reward = float(spec.get("step_reward", 0.0))
        return ToolOutput(blocks=[TextBlock(text=feedback)], reward=step_reward, finished=False)


class Quiz(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, str]]:
        return [{"question": "Repeat after me: 42", "answer": "42"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=str(self.task_spec["question"]))]

    @terminal
    @tool
    async def answer(self, params: Answer) -> ToolOutput:
        """Your final answer."""
        expected = str(self.task_spec["answer"])
        if self.task_spec.get("numeric") and params.answer.strip():
            right = int(params.answer) == int(expected)
        else:
            right = params.answer.strip() == expected
        text = "right" if right else "wrong"
        return ToolOutput(blocks=[TextBlock(text=text)], reward=float(right), finished=True)


app = Server([GuessGame, Quiz]).app
