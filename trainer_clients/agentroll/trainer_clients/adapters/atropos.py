"""Finished groups -> an Atropos trajectory API (`atroposlib`'s `run-api`), as an environment.

Atropos trainers pull batches from that API (`GET /batch`); environments push scored groups
to it. `AtroposPusher` is such an environment: it registers (`POST /register-env`, retried
while the API answers that its trainer has not started) and sends each trainable group as one
`POST /scored_data`, written from atroposlib 0.4.0 (`atroposlib/api/server.py`, `ScoredData`;
masks and placeholder logprobs as `envs/server_handling/managed_server.py` builds them):

| ScoredData          | from agentroll, per sample                                          |
|---------------------|---------------------------------------------------------------------|
| tokens              | prompt_ids + response_ids                                           |
| masks               | -100 for the prompt and every mask-0 response token; the token id   |
|                     | where response_mask is 1 (Atropos's labels)                         |
| inference_logprobs  | 1.0 (Atropos's placeholder) where masks is -100; response_logprobs  |
|                     | where trained                                                       |
| scores              | reward                                                              |
| messages            | messages (every one with its `content` key)                         |
| generation_params   | the group's sampling: temperature, top_p, top_k, logprobs mode      |
| env_id              | what /register-env returned                                         |

A group is sent whole or not at all: an invalid group, or one with a sample that carries no
reward (an `infra_error` or a cancelled job), is left out and reported, never sent with a
score of 0. Multi-agent episodes are refused: push each policy's views
(`policy_trajectories`) instead. Mapping and outcomes: docs/trainers_out.md.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentroll.server.schema import Trajectory
from agentroll.trainer_clients.adapters.batch import single_agent, usable
from agentroll.trainer_clients.errors import AtroposError, ServerUnavailable
from agentroll.trainer_clients.groups import Group

UNTRAINED = -100
"""Atropos's label for a position that is not trained on."""
PLACEHOLDER_LOGPROB = 1.0
"""What Atropos puts in `inference_logprobs` where nothing was sampled."""
WAITING_FOR_TRAINER = "wait for trainer to start"


def scored_sample(t: Trajectory) -> tuple[list[int], list[int], list[float]]:
    """One sample's `tokens`, `masks` and `inference_logprobs`, all of one length."""
    prompt = len(t.prompt_ids)
    masks = [UNTRAINED] * prompt + [
        token if keep else UNTRAINED
        for token, keep in zip(t.response_ids, t.response_mask, strict=True)
    ]
    logprobs = [PLACEHOLDER_LOGPROB] * prompt + [
        logprob if keep else PLACEHOLDER_LOGPROB
        for logprob, keep in zip(t.response_logprobs, t.response_mask, strict=True)
    ]
    return t.prompt_ids + t.response_ids, masks, logprobs


def _messages(t: Trajectory) -> list[dict[str, Any]]:
    return [{"content": None, **m} for m in t.messages]  # Atropos requires the key


def to_scored_data(group: Sequence[Trajectory], env_id: int | None = None) -> dict[str, Any]:
    """One group (its samples in order) as an Atropos `ScoredData` body."""
    samples = single_agent(list(group))
    for t in samples:
        if t.reward is None:
            raise ValueError(f"{t.job_id}: outcome {t.outcome.value} has no reward to score")
    columns = [scored_sample(t) for t in samples]
    info = samples[0].logprobs if samples else None
    return {
        "tokens": [tokens for tokens, _, _ in columns],
        "masks": [masks for _, masks, _ in columns],
        "inference_logprobs": [logprobs for _, _, logprobs in columns],
        "scores": [t.reward for t in samples],
        "messages": [_messages(t) for t in samples],
        "generation_params": info.model_dump(mode="json") if info is not None else None,
        "env_id": env_id,
    }


@dataclass
class PushReport:
    """What one `push` did with the groups it was given."""

    sent: list[str] = field(default_factory=list)
    """Group ids sent, in order."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Group ids left out, and why."""


class AtroposPusher:
    """An Atropos environment that feeds agentroll's finished groups to an Atropos API.

    with AtroposPusher("http://trainer:8000", group_size=8, max_token_length=8192) as env:
        for group in collector.groups():
            env.push([group])
    """

    def __init__(
        self,
        url: str,
        *,
        group_size: int,
        max_token_length: int,
        name: str = "agentroll",
        weight: float = 1.0,
        min_batch_allocation: float | None = None,
        timeout_s: float = 30.0,
        register_wait_s: float = 600.0,
        poll_s: float = 1.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._http = http or httpx.Client(base_url=url, timeout=timeout_s)
        self._registration = {
            "max_token_length": max_token_length,
            "desired_name": name,
            "weight": weight,
            "group_size": group_size,
            "min_batch_allocation": min_batch_allocation,
        }
        self._register_wait_s = register_wait_s
        self._poll_s = poll_s
        self.env_id: int | None = None

    def __enter__(self) -> "AtroposPusher":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections (the registration stays with the API)."""
        self._http.close()

    def _post(self, path: str, body: Any) -> dict[str, Any]:
        try:
            response = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ServerUnavailable(f"Atropos API {path}: {exc}") from exc
        if response.status_code != 200:
            raise AtroposError(response.status_code, response.text)
        answer = response.json()
        if not isinstance(answer, dict):
            raise AtroposError(response.status_code, response.text)
        return answer

    def register(self) -> int:
        """This environment's id; waits (at most `register_wait_s`) for the trainer to start."""
        if self.env_id is not None:
            return self.env_id
        deadline = time.monotonic() + self._register_wait_s
        while True:
            answer = self._post("/register-env", self._registration)
            if answer.get("status") == "success" and isinstance(answer.get("env_id"), int):
                self.env_id = int(answer["env_id"])
                return self.env_id
            if answer.get("status") != WAITING_FOR_TRAINER:
                raise AtroposError(200, str(answer))
            if time.monotonic() >= deadline:
                raise ServerUnavailable(
                    f"the Atropos trainer did not start within {self._register_wait_s:.0f} s"
                )
            time.sleep(self._poll_s)

    def push(self, items: Sequence[Group | Trajectory]) -> PushReport:
        """Send every trainable group (loose trajectories grouped by `group_id`) whole."""
        env_id = self.register()
        report = PushReport()
        for group_id, samples in _groups(items, report.skipped):
            self._post("/scored_data", to_scored_data(samples, env_id))
            report.sent.append(group_id)
        return report


def _groups(
    items: Sequence[Group | Trajectory], skipped: dict[str, str]
) -> list[tuple[str, list[Trajectory]]]:
    """The trainable groups, in first-seen order; the others into `skipped` (by `usable`)."""
    groups: dict[str, list[Group | Trajectory]] = {}
    for item in items:
        key = item.group_id if isinstance(item, Group) else item.group_id or item.job_id
        groups.setdefault(key, []).append(item)
    kept = []
    for group_id, members in groups.items():
        samples, left_out = usable(members)
        skipped.update(left_out)
        if samples:
            kept.append((group_id, samples))
    return kept
