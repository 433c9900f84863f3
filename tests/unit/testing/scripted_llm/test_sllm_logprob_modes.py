"""The double's `--logprobs-mode`: processed logprobs are the modelled distribution after
temperature, top-k and top-p, as vLLM v1's sampler computes them."""

import argparse
import math
from typing import Any

import pytest
from pydantic import ValidationError
from tests.unit.testing.scripted_llm.conftest import ClientFactory

from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm.cli import add_arguments, config_from_args
from agentroll.testing.scripted_llm.config import MoERouting
from agentroll.testing.scripted_llm.logprob_modes import distribution, processed_logprob


def _tempered(raw: float, temperature: float) -> float:
    """log softmax(log p / T) at the sampled token, with the alternatives' sum in closed form
    (a geometric series): an independent route to the same number."""
    p = math.exp(raw)
    z = p ** (1 / temperature) + (1 - p) ** (1 / temperature) / (2 ** (1 / temperature) - 1)
    return math.log(p ** (1 / temperature) / z)


@pytest.mark.parametrize("raw", [-0.01, -0.7, -2.5])
@pytest.mark.parametrize("temperature", [0.5, 0.8, 1.3])
def test_temperature_alone_rescales_the_whole_distribution(raw: float, temperature: float) -> None:
    assert processed_logprob(raw, temperature, -1, 1.0) == pytest.approx(
        _tempered(raw, temperature), abs=1e-12
    )
    assert processed_logprob(raw, 1.0, -1, 1.0) == pytest.approx(raw, abs=1e-12)


def test_top_k_and_top_p_renormalise_over_what_they_keep() -> None:
    raw = -0.3  # p = 0.74: the most likely token; its first alternative holds 0.13
    p = math.exp(raw)
    assert processed_logprob(raw, 1.0, 1, 1.0) == 0.0  # alone in the top 1
    assert processed_logprob(raw, 1.0, 2, 1.0) == pytest.approx(
        math.log(p / (p + (1 - p) / 2)), abs=1e-12
    )
    assert processed_logprob(raw, 1.0, -1, 0.5) == 0.0  # its own mass already exceeds 0.5
    assert processed_logprob(raw, 0.0, 1, 0.5) == raw  # greedy: raw, as vLLM's greedy path
    assert sum(distribution(raw)) == pytest.approx(1.0, abs=1e-15)


async def _logprobs(scripted: ClientFactory, mode: str, **sampling: Any) -> list[float]:
    async with scripted(logprobs_mode=mode, seed=1) as (client, _):
        body = {"prompt": [5, 6, 7], "max_tokens": 12, "logprobs": 0, "seed": 3, **sampling}
        response = await client.post("/v1/completions", json=body)
    return list(response.json()["choices"][0]["logprobs"]["token_logprobs"])


async def test_a_processed_server_answers_what_a_raw_one_answers_then_processes(
    scripted: ClientFactory,
) -> None:
    sampling = {"temperature": 0.7, "top_k": 20, "top_p": 0.95}
    raw = await _logprobs(scripted, "raw_logprobs", **sampling)
    processed = await _logprobs(scripted, "processed_logprobs", **sampling)
    assert processed == [processed_logprob(lp, 0.7, 20, 0.95) for lp in raw]
    assert processed != raw
    # at temperature 1 without filters the two modes agree, as vLLM's do
    assert await _logprobs(scripted, "processed_logprobs") == pytest.approx(
        await _logprobs(scripted, "raw_logprobs"), abs=1e-12
    )


async def test_server_info_reports_the_mode_only_where_vllm_serves_it(
    scripted: ClientFactory,
) -> None:
    async with scripted(logprobs_mode="processed_logprobs") as (client, _):
        info = (await client.get("/server_info", params={"config_format": "json"})).json()
        text = (await client.get("/server_info")).json()
    assert info["vllm_config"]["model_config"]["logprobs_mode"] == "processed_logprobs"
    assert "logprobs_mode=processed_logprobs" in text["vllm_config"]  # the text dump
    async with scripted(version="0.11") as (client, _):
        assert (await client.get("/server_info")).status_code == 404


def test_the_logits_modes_are_refused_rather_than_faked() -> None:
    with pytest.raises(ValidationError, match="logprobs_mode"):
        ScriptedLLMConfig(logprobs_mode="raw_logits")  # type: ignore[arg-type]


def test_the_command_line_serves_either_mode_and_an_moe_model() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = config_from_args(
        parser.parse_args(["--logprobs-mode", "processed_logprobs", "--moe", "4,64,8"])
    )
    assert config.logprobs_mode == "processed_logprobs"
    assert config.moe == MoERouting(num_layers=4, num_experts=64, top_k=8)
    default = config_from_args(parser.parse_args([]))
    assert (default.logprobs_mode, default.moe) == ("raw_logprobs", None)
