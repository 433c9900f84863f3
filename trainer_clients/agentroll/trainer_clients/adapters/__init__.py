"""Trajectories -> what trainers consume. Needs numpy (`pip install numpy`); nothing else.

- `pad_batch` / `PaddedBatch`: the trainer-neutral batch (input ids, attention and loss
  masks, position ids, old logprobs, rewards, GRPO advantages), prompts left-padded and
  responses right-padded so the response always starts at column `prompt_len`; with
  `chains=`, a harness run's other token chains as rows of their own (by kind; see
  `agentroll.trainer_clients.samples`);
- `grpo_advantages`: group-normalised advantages;
- `to_verl`, `to_nemo_rl`, `to_openrlhf`: those trainers' field names and layouts, as
  numpy arrays (wrap with `torch.from_numpy`); see deploy/README.md for the mapping tables;
- `pad_policy_batches` / `policy_trajectories` / `agent_view`: multi-agent episodes as one
  batch per policy of the trainable agents' traces (see `adapters.agents`);
- `AtroposPusher` / `to_scored_data`: finished groups pushed to an Atropos trajectory API as
  one of its environments (see `adapters.atropos`, docs/trainers_out.md).
"""

from agentroll.trainer_clients.adapters import _numpy

_numpy.require_numpy()

from agentroll.trainer_clients.adapters.agents import (  # noqa: E402
    agent_view,
    pad_policy_batches,
    policy_trajectories,
)
from agentroll.trainer_clients.adapters.atropos import (  # noqa: E402
    AtroposError,
    AtroposPusher,
    PushReport,
    to_scored_data,
)
from agentroll.trainer_clients.adapters.batch import (  # noqa: E402
    PaddedBatch,
    grpo_advantages,
    pad_batch,
)
from agentroll.trainer_clients.adapters.nemo_rl import to_nemo_rl  # noqa: E402
from agentroll.trainer_clients.adapters.openrlhf import to_openrlhf  # noqa: E402
from agentroll.trainer_clients.adapters.verl import to_verl  # noqa: E402

__all__ = [
    "AtroposError",
    "AtroposPusher",
    "PaddedBatch",
    "PushReport",
    "agent_view",
    "grpo_advantages",
    "pad_batch",
    "pad_policy_batches",
    "policy_trajectories",
    "to_nemo_rl",
    "to_openrlhf",
    "to_scored_data",
    "to_verl",
]
