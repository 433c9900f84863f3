"""Supervised training of the tiny Qwen2 policy on agentroll transcripts, plain PyTorch on CPU.

Seeded and single-process, so the same recipe gives the same weights on the same machine.
The loss is on the tokens the scripted policy sampled (the trajectory's loss mask); the
output head runs only at those positions, which keeps a step cheap on two cores.
"""

import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentroll.testing.tinypolicy.data import Sequence

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import torch
    from transformers import Qwen2ForCausalLM


@dataclass(frozen=True)
class TrainRecipe:
    steps: int = 1500
    batch_size: int = 64
    learning_rate: float = 4e-3
    warmup_steps: int = 50
    seed: int = 0
    threads: int = 2


def pad_sequences(seqs: list[Sequence]) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """Right-padded ids, attention mask, and loss weights on the *predicted* positions."""
    import torch

    width = max(len(s.input_ids) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attention = torch.zeros(len(seqs), width, dtype=torch.long)
    loss = torch.zeros(len(seqs), width, dtype=torch.bool)
    for row, s in enumerate(seqs):
        ids[row, : len(s.input_ids)] = torch.tensor(s.input_ids)
        attention[row, : len(s.input_ids)] = 1
        loss[row, : len(s.loss_mask)] = torch.tensor(s.loss_mask, dtype=torch.bool)
    return ids, attention, loss


def shared_prefix(ids: "torch.Tensor", at: "torch.Tensor") -> int:
    """Leading positions every row has in common (the handler's system prompt and tool
    list), stopping before the first position that predicts a loss token."""
    import torch

    same = (ids == ids[:1]).all(dim=0)
    common = int(same.long().cumprod(0).sum())
    first_loss = int(torch.nonzero(at.any(dim=0))[0, 0]) if at.any() else ids.shape[1]
    return max(0, min(common, first_loss - 1))


def token_logprobs(
    model: "Qwen2ForCausalLM", ids: "torch.Tensor", attention: "torch.Tensor", at: "torch.Tensor"
) -> "torch.Tensor":
    """Log-probability of `ids[at]` given what precedes it, for each True of `at` (never 0).

    The rows' shared prefix runs once and its cache is repeated over the batch: a tool
    task's prompt is mostly the same few hundred tokens of instructions.
    """
    import torch

    prefix = shared_prefix(ids, at)
    cache = None
    if prefix:
        cache = model.model(input_ids=ids[:1, :prefix], use_cache=True).past_key_values
        cache.batch_repeat_interleave(ids.shape[0])
    out = model.model(input_ids=ids[:, prefix:], attention_mask=attention, past_key_values=cache)
    hidden = out.last_hidden_state
    # Position p predicts token p + 1.
    rows, cols = torch.nonzero(at[:, prefix + 1 :], as_tuple=True)
    logits = model.lm_head(hidden[rows, cols])
    targets = ids[rows, cols + prefix + 1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None])[:, 0]


def _batches(seqs: list[Sequence], size: int, rng: random.Random) -> list[list[Sequence]]:
    """Batches of similar length (less padding), in random order."""
    order = sorted(seqs, key=lambda s: (len(s.input_ids), rng.random()))
    batches = [order[i : i + size] for i in range(0, len(order), size)]
    rng.shuffle(batches)
    return batches


def train(seqs: list[Sequence], init: Path, recipe: TrainRecipe) -> tuple[Any, dict[str, Any]]:
    """The model of folder `init` trained on `seqs`, and a log (loss per step, seconds)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.set_num_threads(recipe.threads)
    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    model = Qwen2ForCausalLM.from_pretrained(init, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.01)

    def lr_at(step: int) -> float:
        warm = min(1.0, (step + 1) / recipe.warmup_steps)
        return warm * 0.5 * (1 + math.cos(math.pi * step / recipe.steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    losses: list[float] = []
    started = time.monotonic()
    pending: list[list[Sequence]] = []
    for _ in range(recipe.steps):
        if not pending:
            pending = _batches(seqs, recipe.batch_size, rng)
        ids, attention, at = pad_sequences(pending.pop())
        loss = -token_logprobs(model, ids, attention, at).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(round(loss.item(), 4))
        if len(losses) % 50 == 0:
            log.info("step %d/%d: loss %.3f", len(losses), recipe.steps, loss.item())
    model.eval()
    report = {
        "seconds": round(time.monotonic() - started, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "sequences": len(seqs),
        "loss": losses,
    }
    return model, report
