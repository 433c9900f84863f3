"""A verifiers worker's side of legacy environments (verifiers 0.3.1's `verifiers.legacy`,
`import verifiers as vf`): a package exporting `load_environment(**kwargs) -> vf.Environment`.

Loaded by `worker.py` by file path and served by its loop, in the legacy environment's own
interpreter (`venv.LEGACY`): standard library and the environment's packages only, verifiers
imported only inside the functions (the module loads in v1 workers too). Requests:

    <- {"op": "legacy_rows", "environment": {"id": ..., "args": {...}}, "split": "train",
        "skip": 0, "limit": 100}
    -> {"ok": true, "rows": [{...}], "unsupported": ["why", ...]}
    <- {"op": "legacy_tools", "environment": {...}, "row": {...}}
    -> {"ok": true, "tools": [{"type": "function", "function": {...}}]}
    <- {"op": "legacy_rollout", "environment": {...}, "row": {...}, "control": false}
    -> {"turn": [{"role": "user", "content": ...}]}
    <- {"reply": "text", "tool_calls": [{"id", "name", "arguments"}]} | {"end": "max_turns"}
    -> ... {"ok": true, "rewards": {"name": {"score": 1.0, "weight": 1.0}},
            "metrics": {"name": 1.0 | null}}

`legacy_rollout` is the environment's own `rollout()` (its `MultiTurnEnv` loop: stop
conditions, `env_response`, a `ToolEnv`'s tools run here), its model client the rollout's
relay (`RelayClient`): each prompt's new messages go to the server, which samples the policy's
reply with agentroll's exact tokens. Then its rubric scores the final state, each reward
function called as verifiers' `Rubric` calls it, but a function that raises fails the scoring
(verifiers logs it and counts 0: a broken reward would pass for the reply's score). A metric
(weight 0) that raises is reported as null. It is answered by a child forked for it
(`worker.in_child`): the policy's text reaches the tools and the rubric there.

A failure is `{"ok": false, "stage": "load" | "episode" | "score", "error": ...}`: `load`
while the environment or the row's state was built, `episode` while its rollout ran (a
non-`vf.Error` it raised, or the `vf.Error` it stopped on), `score` while its reward functions
ran.
"""

import functools
import json
import time
import uuid
from typing import Any

OPS = frozenset({"legacy_rows", "legacy_tools", "legacy_rollout"})
MODEL = "policy"
"""The model name the environment's state records (sampling is the server's)."""


class Environments:
    """Legacy environments by their JSON (`{"id", "args"}`), loaded once per worker."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}
        self.warmed: set[str] = set()
        """Environments whose rollout ran once in the worker itself, as the control plays
        it (`worker.warm_up_once`)."""

    def get(self, environment: dict[str, Any]) -> Any:
        key = json.dumps(environment, sort_keys=True)
        if key not in self._loaded:
            import verifiers as vf

            env = vf.load_environment(str(environment["id"]), **environment.get("args", {}))
            if not isinstance(env, vf.Environment):
                raise TypeError(
                    f"load_environment returned {type(env).__name__}, not an Environment"
                )
            # agentroll's own run limits bound the rollout: the environment's wall-clock
            # timeout would count the server's sampling time against the policy.
            env.timeout_seconds = None
            self._loaded[key] = env
        return self._loaded[key]


def leaf_rubrics(rubric: Any) -> list[Any]:
    """The rubrics whose functions score: a `RubricGroup`'s members, recursively."""
    import verifiers as vf

    if isinstance(rubric, vf.RubricGroup):
        return [leaf for member in rubric.rubrics for leaf in leaf_rubrics(member)]
    return [rubric]


def unsupported(env: Any) -> list[str]:
    """What the environment needs that agentroll does not run yet (refused, never scored
    without it)."""
    import verifiers as vf

    problems = []
    if env.requires_group_rollouts:
        problems.append(f"{type(env).__name__} runs a group's rollouts together")
    for rubric in leaf_rubrics(env.rubric):
        name = type(rubric).__name__
        if isinstance(rubric, vf.JudgeRubric):
            problems.append(f"rubric {name} asks an LLM judge")
        elif type(rubric).score_rollout is not vf.Rubric.score_rollout:
            problems.append(f"rubric {name} scores by its own score_rollout")
        problems.extend(
            f"reward {getattr(f, '__name__', f)!r} scores a group of rollouts together"
            for f in rubric.funcs
            if rubric._is_group_func(f)
        )
    return problems


def list_rows(env: Any, request: dict[str, Any]) -> dict[str, Any]:
    dataset = env.get_eval_dataset() if request.get("split") == "eval" else env.get_dataset()
    skip = int(request.get("skip", 0))
    end = min(len(dataset), skip + int(request.get("limit", len(dataset))))
    rows = [json.loads(json.dumps(dataset[i], default=str)) for i in range(skip, end)]
    return {"ok": True, "rows": rows, "unsupported": unsupported(env)}


class TurnsEnded(Exception):
    """The rollout's limits ended the exchange (raised as a `vf.Error`, `turns_ended`, so
    the rollout stops on it as on a model error, and is scored)."""


def turns_ended(end: str) -> TurnsEnded:
    return _turns_ended_class()(f"the rollout's limits ended it ({end})")


@functools.cache
def _turns_ended_class() -> type[TurnsEnded]:
    import verifiers as vf

    return type("TurnsEnded", (TurnsEnded, vf.Error), {})


@functools.cache
def relay_client_class() -> type:
    """`RelayClient`, a verifiers model client whose native API is the rollout's relay."""
    from verifiers.legacy.clients.client import Client
    from verifiers.legacy.types import Response, ResponseMessage, ToolCall

    class RelayClient(Client):
        """Sends each prompt's messages the server has not seen yet (the environment's
        response since the policy's last reply) and returns the policy's reply. A prompt that
        does not extend the conversation (a rollout that rewrites its history) fails: the
        policy's tokens were sampled on the conversation as it was."""

        def __init__(self, relay: Any) -> None:
            super().__init__(relay)
            self.seen = 0

        def setup_client(self, config: Any) -> Any:
            raise TypeError("a relay client is built from the rollout's relay, not a config")

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[list[dict[str, Any]], dict]:
            return [m.model_dump(mode="json", exclude_none=True) for m in messages], {}

        async def get_native_response(
            self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **_: Any
        ) -> dict[str, Any]:
            if self.seen and (
                len(prompt) < self.seen or prompt[self.seen - 1]["role"] != "assistant"
            ):
                raise RuntimeError("the prompt does not extend the conversation so far")
            answer: dict[str, Any] = self.client.ask(prompt[self.seen :] if self.seen else prompt)
            if "reply" not in answer:
                raise turns_ended(str(answer.get("end")))
            self.seen = len(prompt) + 1
            return answer

        async def raise_from_native_response(self, response: Any) -> None:
            return None  # the server sampled the reply: nothing here can be malformed

        async def from_native_response(self, response: dict[str, Any]) -> Any:
            calls = [ToolCall(**c) for c in response.get("tool_calls") or []]
            message = ResponseMessage(
                content=response["reply"],
                tool_calls=calls or None,
                finish_reason="tool_calls" if calls else "stop",
                is_truncated=False,
            )
            return Response(
                id=uuid.uuid4().hex, created=int(time.time()), model=MODEL, message=message
            )

        async def close(self) -> None:
            return None

    return RelayClient


async def tool_specs(env: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools the row's rollout offers the model, as OpenAI function schemas: the state's
    `tool_defs`, resolved by the environment's own `init_state`."""
    state = await env.init_state(row, relay_client_class()(None), MODEL)
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in state["tool_defs"]
    ]


async def scored(env: Any, state: Any) -> dict[str, Any]:
    """Every reward function of the environment's rubric on the final state, called with the
    arguments it names (verifiers' `maybe_call_with_named_args`); a raise fails it."""
    from verifiers.legacy.utils.async_utils import maybe_call_with_named_args

    rewards: dict[str, dict[str, float]] = {}
    metrics: dict[str, float | None] = {}
    for rubric in leaf_rubrics(env.rubric):
        for func, weight in zip(rubric.funcs, rubric.weights, strict=True):
            name = getattr(func, "__name__", repr(func))
            objects = rubric.score_objects(state)
            if not weight:  # a metric: reported, never summed
                try:
                    metrics[name] = float(await maybe_call_with_named_args(func, **objects))
                except Exception:
                    metrics[name] = None
                continue
            value = float(await maybe_call_with_named_args(func, **objects))
            while name in rewards:  # two rubrics' functions of one name both count
                name += "'"
            rewards[name] = {"score": value, "weight": float(weight)}
    return {"ok": True, "rewards": rewards, "metrics": metrics}


def rollout(env: Any, loop: Any, request: dict[str, Any], worker: Any, replies: Any) -> Any:
    """The environment's own rollout with the policy (or, for the control, empty replies),
    then its rubric on the final state."""
    relay = worker._env.Relay(lambda message: worker._shared._send(replies, message), request)
    try:
        state = loop.run_until_complete(
            env.rollout(request["row"], relay_client_class()(relay), MODEL, {})
        )
    except Exception as exc:  # the environment's code raised during the rollout
        return worker.failed("episode", exc)
    error = state.get("error")
    if error is not None and not isinstance(error, TurnsEnded):  # the `vf.Error` it stopped on
        return worker.failed("episode", error.__cause__ or error)
    try:
        result = loop.run_until_complete(scored(env, state))
    except Exception as exc:
        return worker.failed("score", exc)
    return result  # a score that is not finite is the server's to blame


def serve(
    envs: Environments, loop: Any, request: dict[str, Any], replies: Any, worker: Any
) -> dict[str, Any]:
    """A legacy request answered; `worker` is the serving `worker.py` module (its
    `failed`, its `in_child`, its relay)."""
    try:
        env = envs.get(request["environment"])
        if request["op"] == "legacy_rows":
            return list_rows(env, request)
        problems = unsupported(env)
        if problems:
            raise ValueError("; ".join(problems))
        if request["op"] == "legacy_tools":  # schemas: nothing of the policy's is read
            return {"ok": True, "tools": loop.run_until_complete(tool_specs(env, request["row"]))}
    except Exception as exc:  # the environment or the job is unusable: not the policy's doing
        return worker.failed("load", exc)
    import gc

    key = json.dumps(request["environment"], sort_keys=True)
    control = {**request, "control": True, "max_turns": 1}  # one empty reply, answered here
    worker.warm_up_once(envs.warmed, key, loop, lambda: rollout(env, loop, control, worker, None))
    gc.freeze()  # what the worker holds stays shared with its children, not copied
    answer: dict[str, Any] = worker.in_child(lambda: rollout(env, loop, request, worker, replies))
    return answer
