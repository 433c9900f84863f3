"""How a verifiers worker takes the one reply of a child forked for a request
(`child_channel`): the worker, not the child, decides the failure's stage, and checks the
rewards against the rubric it loaded itself. The child runs code that reads the policy's work
and can write whatever it likes; what it cannot do is report a load failure (the worker loaded
everything before the fork), or a reward under a name or a weight its rubric does not have.
Loaded by `worker.py` by file path, in the environment's interpreter: standard library only."""

from collections.abc import Callable
from typing import Any, NamedTuple

MAX_ERROR_CHARS = 4000

Clean = Callable[[dict[str, Any]], dict[str, Any]]
"""A successful reply as the server gets it, rebuilt from the child's; `ValueError` where it
does not fit what the worker loaded."""


class Check(NamedTuple):
    """`child_channel.in_child`'s `final`, `broken` and `relay`, for one request."""

    final: Callable[[dict[str, Any], frozenset[str]], dict[str, Any]]
    broken: Callable[[str], dict[str, Any]]
    relay: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def failed_as(stage: str, error: object) -> dict[str, Any]:
    return {"ok": False, "stage": stage, "error": str(error)[:MAX_ERROR_CHARS]}


def reply_check(
    stages: tuple[str, ...],
    clean: Clean,
    relay: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Check:
    """A failure keeps its stage where the child may report it (`stages`); any other (a forged
    `load`), a reply that does not fit (`clean`) and a broken channel fail as `stages[0]`:
    the code the request ran on the policy's work broke it."""

    def final(reply: dict[str, Any], _marks: frozenset[str]) -> dict[str, Any]:
        if reply.get("ok") is not True:
            stage = reply.get("stage")
            return failed_as(stage if stage in stages else stages[0], reply.get("error"))
        try:
            return clean(reply)
        except ValueError as exc:
            return failed_as(stages[0], f"ValueError: {exc}")

    return Check(final, lambda why: failed_as(stages[0], f"ChannelError: {why}"), relay)


def done(reply: dict[str, Any]) -> dict[str, Any]:
    """An episode's reply: it completed (nothing else is read)."""
    return {"ok": True}


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def rubric_rewards(
    reply: dict[str, Any], weights: dict[str, float], mapped: bool
) -> dict[str, Any]:
    """A scoring's reply, its rewards checked against the rubric the worker loaded (`weights`,
    by reward name): each under one of its names, at that name's weight, every name present.
    `mapped`: a reward function may return a mapping of rewards of its own names, each at the
    function's weight (verifiers v1), so a name the rubric lacks needs one of its weights."""
    rewards, metrics = reply.get("rewards"), reply.get("metrics", {})
    if not isinstance(rewards, dict) or not isinstance(metrics, dict):
        raise ValueError("the reply has no rewards and metrics")
    clean: dict[str, dict[str, float] | None] = {}
    for name, reward in rewards.items():
        if reward is None and name in weights:  # seeded, never scored: the server's to judge
            clean[name] = None
            continue
        if not (isinstance(reward, dict) and set(reward) == {"score", "weight"}):
            raise ValueError(f"reward {name!r} is not a score and a weight")
        if not (_number(reward["score"]) and _number(reward["weight"])):
            raise ValueError(f"reward {name!r} is not a number")
        weight = float(reward["weight"])
        allowed = weights.get(name)
        if allowed is None and mapped and weight in weights.values():
            allowed = weight
        if weight != allowed:
            raise ValueError(
                f"reward {name!r} at weight {weight:g} is not the rubric's: {weights}"[:500]
            )
        clean[name] = {"score": float(reward["score"]), "weight": weight}
    if not mapped and set(clean) != set(weights):
        raise ValueError(f"rewards {sorted(clean)} are not the rubric's {sorted(weights)}"[:500])
    if not all(v is None or _number(v) for v in metrics.values()):
        raise ValueError("a metric is not a number")
    shown = {str(k): None if v is None else float(v) for k, v in metrics.items()}
    return {"ok": True, "rewards": clean, "metrics": shown}


def call_check() -> Check:
    """A tool call's reply: the model reads the tool's text. A load failure stands only where
    the child failed before its toolsets were set up (before the model's arguments reached
    them); after, whatever it says is the call's error, answered to the model."""

    def as_error(text: str) -> dict[str, Any]:
        return {"ok": True, "text": text[:MAX_ERROR_CHARS], "is_error": True}

    def final(reply: dict[str, Any], marks: frozenset[str]) -> dict[str, Any]:
        if reply.get("ok") is True:
            text, is_error = reply.get("text"), reply.get("is_error")
            if isinstance(text, str) and isinstance(is_error, bool):
                return {"ok": True, "text": text, "is_error": is_error}
            return as_error("the tool's process gave no text")
        if reply.get("stage") == "load" and "set_up" not in marks:
            return failed_as("load", reply.get("error"))
        return as_error(str(reply.get("error")))

    return Check(final, lambda why: as_error(f"the tool's process broke its channel: {why}"))
