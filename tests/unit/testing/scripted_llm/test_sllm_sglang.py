"""The scripted backend in SGLang mode: wire shapes of `/generate`, errors, info and tokenizer
routes per release, pause semantics, and the strict config (docs/protocol.md §9)."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentroll.server.llm.local_tokenizer import LocalChatTokenizer
from agentroll.testing.scripted_llm import ScriptedLLMConfig, get_chat_template
from agentroll.testing.scripted_llm.export import export_tokenizer

ClientFactory = Callable[..., Any]  # the `scripted` fixture (conftest.py)
ChatIds = Callable[[str], list[int]]
SG = {"flavor": "sglang", "policy": ["echo"]}
REPEAT = "Repeat after me: hello there, general"


def gen(ids: list[int], **sampling: Any) -> dict[str, Any]:
    params = {"max_new_tokens": 64, "sampling_seed": 5, **sampling}
    return {"input_ids": ids, "sampling_params": params, "return_logprob": True}


async def test_generate_shape_and_same_sample_as_the_vllm_flavor(
    scripted: ClientFactory, chat_ids: ChatIds
):
    ids = chat_ids(REPEAT)
    async with scripted(**SG) as (client, engine):
        r = await client.post("/generate", json=gen(ids))
        log = (await client.get("/scripted/requests")).json()["requests"]
    async with scripted(policy=["echo"]) as (vclient, _):
        v = await vclient.post(
            "/v1/completions",
            json={
                "prompt": ids,
                "max_tokens": 64,
                "seed": 5,
                "logprobs": 0,
                "return_token_ids": True,
            },
        )
    body = r.json()
    meta = body["meta_info"]
    choice = v.json()["choices"][0]
    eos = engine.tokenizer.eos_token_id
    assert r.status_code == 200
    assert body["output_ids"] == choice["token_ids"] == log[0]["token_ids"]
    assert body["text"] == choice["text"] == "hello there, general"
    assert [e[0] for e in meta["output_token_logprobs"]] == choice["logprobs"]["token_logprobs"]
    assert [e[1] for e in meta["output_token_logprobs"]] == body["output_ids"]
    assert {e[2] for e in meta["output_token_logprobs"]} == {None}
    assert meta["finish_reason"] == {"type": "stop", "matched": eos}
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(ids), len(body["output_ids"]))
    assert meta["output_token_logprobs_length"] == len(body["output_ids"])
    assert meta["input_token_logprobs"] == []
    assert meta["weight_version"] == "0"


async def test_length_stop_string_and_text_in_logprobs(scripted: ClientFactory, chat_ids: ChatIds):
    ids = chat_ids(REPEAT)
    async with scripted(**SG) as (client, engine):
        short = (await client.post("/generate", json=gen(ids, max_new_tokens=3))).json()
        cut = (await client.post("/generate", json=gen(ids, stop=["there"]))).json()
        kept = (
            await client.post("/generate", json=gen(ids, stop=["there"], no_stop_trim=True))
        ).json()
        texts = (
            await client.post("/generate", json={**gen(ids), "return_text_in_logprobs": True})
        ).json()
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert len(short["output_ids"]) == 3
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": "there"}
    assert (cut["text"], kept["text"]) == ("hello ", "hello there")
    assert cut["output_ids"] == kept["output_ids"]  # trimming touches the text only
    pieces = [engine.tokenizer.token_text[i] for i in texts["output_ids"]]
    assert [e[2] for e in texts["meta_info"]["output_token_logprobs"]] == pieces


async def test_n_and_batches_answer_lists(scripted: ClientFactory, chat_ids: ChatIds):
    a, b = chat_ids(REPEAT), chat_ids("Repeat after me: bye")
    async with scripted(**SG) as (client, _):
        two = (await client.post("/generate", json=gen(a, n=2, temperature=1.0))).json()
        batch = (await client.post("/generate", json=gen([a, b]))).json()
    assert isinstance(two, list) and len(two) == 2
    assert [item["text"] for item in batch] == ["hello there, general", "bye"]


async def test_sampling_contract_per_release(scripted: ClientFactory, chat_ids: ChatIds):
    ids = chat_ids(REPEAT)
    async with scripted(**SG) as (client, _):
        strict = await client.post("/generate", json=gen(ids, max_tokens=5))
    async with scripted(**SG, sglang_version="0.5.2") as (client, _):
        lenient = await client.post("/generate", json=gen(ids, max_tokens=5))
    assert strict.status_code == 400
    assert isinstance(strict.json()["error"], str)
    assert "max_tokens" in strict.json()["error"]
    assert lenient.status_code == 200


@pytest.mark.parametrize(
    ("prompt_len", "max_new", "message"),
    [
        (64, 1, "The input (64 tokens) is longer than the model's context length (64 tokens)."),
        (60, 4, "You requested a total of 64 tokens: 60 tokens from the input messages and 4"),
    ],
)
async def test_context_errors(scripted: ClientFactory, prompt_len: int, max_new: int, message: str):
    async with scripted(**SG, max_model_len=64) as (client, _):
        r = await client.post("/generate", json=gen([100] * prompt_len, max_new_tokens=max_new))
        fits = await client.post("/generate", json=gen([100] * 60, max_new_tokens=3))
    assert r.status_code == 400
    assert message in r.json()["error"]["message"]
    assert fits.status_code == 200


async def test_info_and_tokenizer_routes_per_release(scripted: ClientFactory):
    messages = [{"role": "user", "content": "Hi"}]
    async with scripted(**SG) as (client, _):
        info = (await client.get("/model_info")).json()
        alias = (await client.get("/get_model_info")).json()
        tok = (await client.post("/tokenize", json={"messages": messages})).json()
        both = await client.post("/tokenize", json={"messages": messages, "prompt": "x"})
        text = (await client.post("/detokenize", json={"tokens": tok["tokens"]})).json()
    async with scripted(**SG, sglang_version="0.5.2") as (old, _):
        old_info = (await old.get("/get_model_info")).json()
        missing = [
            (await old.get("/model_info")).status_code,
            (await old.post("/tokenize", json={"prompt": "x"})).status_code,
        ]
    assert info == alias
    assert info["served_model_name"] == "policy"
    assert tok["tokens"] == get_chat_template().encode(messages, add_generation_prompt=True)
    assert (tok["count"], tok["max_model_len"]) == (len(tok["tokens"]), 8192)
    assert both.status_code == 400
    assert text == {"text": "user\nHi\nassistant\n"}  # special tokens skipped by default
    assert set(old_info) == {
        "model_path",
        "tokenizer_path",
        "is_generation",
        "preferred_sampling_params",
        "weight_version",
    }
    assert missing == [404, 404]


async def test_pause_abort_keeps_partial_ids_and_holds_new_requests(
    scripted: ClientFactory, chat_ids: ChatIds
):
    ids = chat_ids(REPEAT)
    async with scripted(**SG) as (client, _):
        full = (await client.post("/generate", json=gen(ids))).json()
    async with scripted(**SG, latency_s=1.0) as (client, engine):
        task = asyncio.create_task(client.post("/generate", json={**gen(ids), "rid": "r-1"}))
        async with asyncio.timeout(10):
            while not any(engine.progress(r) > 0.3 for r in engine.running):
                await asyncio.sleep(0.01)
        paused = await client.post("/pause_generation", json={"mode": "abort"})
        aborted = (await task).json()
        health = (await client.get("/health")).status_code
        held = asyncio.create_task(client.post("/generate", json=gen(ids, max_new_tokens=2)))
        async with asyncio.timeout(10):
            while engine.waiting != 1:
                await asyncio.sleep(0.01)
        resumed = await client.post("/continue_generation", json={})
        after = await held
    assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
    assert aborted["meta_info"]["finish_reason"]["type"] == "abort"
    assert aborted["meta_info"]["id"] == "r-1"
    n = len(aborted["output_ids"])
    assert 0 < n < len(full["output_ids"])
    assert aborted["output_ids"] == full["output_ids"][:n]
    assert health == 503
    assert resumed.json()["status"] == "ok"
    assert after.status_code == 200


async def test_abort_request_matches_rid_prefix(scripted: ClientFactory, chat_ids: ChatIds):
    ids = chat_ids(REPEAT)
    async with scripted(**SG, latency_s=1.0) as (client, engine):
        task = asyncio.create_task(client.post("/generate", json={**gen(ids), "rid": "job7-t3"}))
        async with asyncio.timeout(10):
            while not engine.running:
                await asyncio.sleep(0.01)
        r = await client.post("/abort_request", json={"rid": "job7"})
        body = (await task).json()
    assert r.status_code == 200
    assert body["meta_info"]["finish_reason"]["type"] == "abort"


def test_config_is_strict_about_flavor_fields():
    with pytest.raises(ValidationError, match="flavor 'vllm' only"):
        ScriptedLLMConfig(flavor="sglang", version="0.2x")
    with pytest.raises(ValidationError, match="flavor 'sglang' only"):
        ScriptedLLMConfig(sglang_version="0.5.2")
    with pytest.raises(ValidationError, match=r"not in the 0\.33 family"):
        ScriptedLLMConfig(version="0.33", release="0.14.0")
    with pytest.raises(ValidationError):
        ScriptedLLMConfig(flavor="sglang", sglang_version="0.4.0")
    assert ScriptedLLMConfig(version="0.2x", release="0.14.0").reported_release == "0.14.0"


CONVERSATIONS: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = [
    ([{"role": "user", "content": "Hi"}], None),
    (
        [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "ls"},
            {
                "role": "assistant",
                "content": "Sure.",
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": {"cmd": "ls"}},
                    }
                ],
            },
            {"role": "tool", "content": "a\nb", "tool_call_id": "1"},
            {"role": "tool", "content": "c", "tool_call_id": "2"},
            {"role": "assistant", "content": "Three files: a, b, c — done."},
        ],
        [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
    ),
]


@pytest.mark.parametrize(("messages", "tools"), CONVERSATIONS)
def test_exported_tokenizer_renders_like_the_server(
    tmp_path: Path, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
):
    local = LocalChatTokenizer.from_dir(export_tokenizer(tmp_path))
    template = get_chat_template()
    for gen_prompt, cont in [(True, False), (False, False), (False, True)]:
        expected = template.encode(messages, tools, gen_prompt, cont)
        got = local.encode_messages(
            messages, tools, add_generation_prompt=gen_prompt, continue_final_message=cont
        )
        assert got == expected, (gen_prompt, cont)


def test_cli_flags_build_an_sglang_config():
    import argparse

    from agentroll.testing.scripted_llm.cli import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--flavor", "sglang", "--sglang-version", "0.5.2"])
    config = config_from_args(args)
    assert (config.flavor, config.sglang_version) == ("sglang", "0.5.2")
    with pytest.raises(ValidationError, match="flavor 'vllm' only"):
        config_from_args(parser.parse_args(["--flavor", "sglang", "--version", "0.11"]))
    assert config_from_args(parser.parse_args([])).version == "0.33"
