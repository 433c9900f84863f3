"""A legacy verifiers environment's dataset rows as `verifiers_legacy` job instances: each row
of `load_environment(**args)`'s dataset (as the environment formatted it: `prompt` messages,
`answer`, `info`, `example_id`, its own columns) becomes one instance."""

from collections.abc import Sequence
from typing import Any, Literal

from agentroll.handlers.builtin.verifiers_env.legacy import LegacyEnvironmentSpec
from agentroll.handlers.builtin.verifiers_env.tasks import listing
from agentroll.handlers.builtin.verifiers_env.venv import LEGACY, ensure_verifiers_venv


async def legacy_instances(
    environment: str,
    packages: Sequence[str] = (),
    args: dict[str, Any] | None = None,
    *,
    split: Literal["train", "eval"] = "train",
    skip: int = 0,
    limit: int = 1000,
    score_timeout_s: float = 60.0,
) -> list[dict[str, Any]]:
    """The instances of rows `skip` to `skip + limit` of `environment`'s dataset (`split`
    "eval": its eval dataset, as verifiers' `get_eval_dataset` picks it), installed from
    `packages` into the legacy verifiers environment first, if it is not cached yet."""
    spec = LegacyEnvironmentSpec(
        id=environment, args=args or {}, packages=list(packages), score_timeout_s=score_timeout_s
    )
    venv = await ensure_verifiers_venv(spec.packages, stack=LEGACY)
    request = {
        "op": "legacy_rows",
        "environment": spec.loaded(),
        "split": split,
        "skip": skip,
        "limit": limit,
    }
    reply = await listing(venv.python, request, "environment", environment)
    spec_json = spec.model_dump(mode="json")
    return [{"environment": spec_json, "row": row} for row in reply["rows"]]
