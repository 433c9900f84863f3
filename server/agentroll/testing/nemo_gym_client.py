"""NeMo RL's side of NeMo Gym's agent protocol, for tests of `agentroll nemo-gym-agent`.

Written from upstream source (NeMo Gym needs Python >= 3.12 and NeMo RL a GPU stack, so
neither is imported here):

- NeMo Gym, commit 07d6b0d07b22fcf530b4c211dae2ee23100428e4:
  `nemo_gym/rollout_collection.py` (`run_examples`: `POST /run` with the row as the body,
  an error status raised), `nemo_gym/base_resources_server.py` (`BaseVerifyResponse`: the
  run request plus `response` and a float `reward`), `nemo_gym/openai_utils.py` (output
  items; `TokenIDLogProbMixin`, whose three token fields come all together or not at all);
- NeMo RL, commit 7ea279abfbeb698b092856d0dab61e7cf39bc909:
  `nemo_rl/environments/nemo_gym.py` (`_postprocess_nemo_gym_to_nemo_rl_result`: the
  message log built from the output items that carry `generation_token_ids`, each one's
  prompt required to extend every token seen before) and `nemo_rl/experience/failures.py`
  (`http_status_is_infra`).
"""

from typing import Any

import httpx

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
RESPONSE_KEYS = ("id", "created_at", "model", "object", "output", "parallel_tool_calls")
ITEM_KEYS = {
    "message": ("id", "content", "role", "status"),
    "function_call": ("arguments", "call_id", "name"),
    "function_call_output": ("call_id", "output"),
}
RETRIABLE_4XX = frozenset({408, 409, 425, 429})


class RunFailed(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"/run answered {status}: {body[:300]}")
        self.status = status


def http_status_is_infra(status: int) -> bool:
    """NeMo RL's call: the endpoint is unwell (retry elsewhere), not the row bad."""
    return status >= 500 or status in RETRIABLE_4XX


async def run(agent_url: str, row: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """One `/run`, as NeMo Gym's rollout collection sends it; `RunFailed` on an error status."""
    async with httpx.AsyncClient(base_url=agent_url, timeout=timeout_s) as http:
        answer = await http.post("/run", json=row)
    if answer.status_code >= 400:
        raise RunFailed(answer.status_code, answer.text)
    result = answer.json()
    check_verify_response(result)
    return result


def check_verify_response(result: dict[str, Any]) -> None:
    """The shape NeMo Gym's models declare; `AssertionError` naming what breaks it."""
    assert isinstance(result.get("responses_create_params"), dict), "no responses_create_params"
    assert isinstance(result.get("reward"), float), f"reward {result.get('reward')!r}"
    response = result["response"]
    missing = [key for key in RESPONSE_KEYS if key not in response]
    assert not missing and response["object"] == "response", f"response lacks {missing}"
    for item in response["output"]:
        required = ITEM_KEYS.get(item.get("type"))
        assert required is not None, f"unknown output item type {item.get('type')!r}"
        assert all(key in item for key in required), f"{item['type']} lacks one of {required}"
        present = [f for f in TOKEN_FIELDS if f in item]
        assert present in ([], list(TOKEN_FIELDS)), f"partial token metadata {present}"
        if present:
            assert all(isinstance(t, int) for t in item["prompt_token_ids"])
            assert len(item["generation_token_ids"]) == len(item["generation_log_probs"])


def message_log(result: dict[str, Any]) -> list[dict[str, Any]]:
    """NeMo RL's message log for one rollout: a `user` entry of the new prompt tokens, then
    an `assistant` entry of the sampled ones (with their logprobs), per trainable item."""
    log: list[dict[str, Any]] = []
    seen: list[int] = []
    for item in result["response"]["output"]:
        if not item.get("generation_token_ids"):
            continue
        prompt = item["prompt_token_ids"]
        if prompt[: len(seen)] != seen:
            raise AssertionError("Non-contiguous messages found!")
        log.append({"role": "user", "token_ids": prompt[len(seen) :]})
        log.append(
            {
                "role": "assistant",
                "token_ids": item["generation_token_ids"],
                "generation_logprobs": item["generation_log_probs"],
            }
        )
        seen = prompt + item["generation_token_ids"]
    if not log:
        raise ValueError("NeMo Gym returned a result with no generation data.")
    return log
