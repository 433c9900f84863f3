"""A guessing game as an OpenEnv environment, served by openenv-core's own server.

Run in the openenv environment (`server.py`), never imported by agentroll:
`python -m uvicorn guess_env:app`. Reset with `{"target": 1-10}` (`"crash_on_step": true`
for an environment whose process dies at the first step, dropping its WebSockets;
`"raise_on_step": true` for one whose `step` raises; `"raise_on_guess": n` for one whose
`step` raises on the guess `n` alone, as an environment bug one action provokes);
each `{"guess": n}` (1 to 10: the action model refuses anything else) is answered `higher`,
`lower` or `correct`, with reward 1.0 and `done` on `correct`, -0.1 otherwise.
`GET /sessions` says how many environments (one per session) were made and how many are
still open.
"""

import os
import uuid
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from pydantic import Field

SESSIONS = {"made": 0, "open": 0}


class GuessAction(Action):
    guess: int = Field(..., ge=1, le=10, description="Your guess, 1 to 10.")


class GuessObservation(Observation):
    prompt: str = ""
    feedback: str = ""


class GuessEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self._target = 0
        self._crash = False
        self._raise = False
        self._raise_on: int | None = None
        SESSIONS["made"] += 1
        SESSIONS["open"] += 1

    def close(self) -> None:
        SESSIONS["open"] -= 1

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GuessObservation:
        self._target = int(kwargs.get("target", 5))
        self._crash = bool(kwargs.get("crash_on_step", False))
        self._raise = bool(kwargs.get("raise_on_step", False))
        self._raise_on = kwargs.get("raise_on_guess")
        self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
        prompt = "Guess the number from 1 to 10."
        return GuessObservation(prompt=prompt, feedback="", reward=None, done=False)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        if self._crash:
            os._exit(1)
        if self._raise:
            raise RuntimeError("the guessing game's step is broken")
        if action.guess == self._raise_on:
            raise RuntimeError(f"the guessing game chokes on {action.guess}")
        self._state.step_count += 1
        guess = action.guess
        if guess == self._target:
            return GuessObservation(feedback="correct", reward=1.0, done=True)
        feedback = "higher" if guess < self._target else "lower"
        return GuessObservation(feedback=feedback, reward=-0.1, done=False)

    @property
    def state(self) -> State:
        return self._state


app = create_fastapi_app(GuessEnv, GuessAction, GuessObservation, max_concurrent_envs=128)


@app.get("/sessions")
def sessions() -> dict[str, int]:
    return dict(SESSIONS)
