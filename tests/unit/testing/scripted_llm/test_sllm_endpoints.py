"""Tokenize/detokenize, discovery, health, metrics and the test-double extensions."""

from collections.abc import Callable
from typing import Any

from agentroll.testing.scripted_llm import get_chat_template, get_tokenizer

ClientFactory = Callable[..., Any]  # the `scripted` fixture (conftest.py)

TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


async def test_tokenize_prompt_form(scripted: ClientFactory):
    tok = get_tokenizer()
    async with scripted(max_model_len=4096) as (client, _):
        r = await client.post(
            "/tokenize",
            json={"model": "policy", "prompt": "Hello world", "return_token_strs": True},
        )
        plain = (await client.post("/tokenize", json={"prompt": "Hello world"})).json()
    body = r.json()
    assert body["tokens"] == tok.encode("Hello world")
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 4096
    assert "".join(body["token_strs"]) == "HelloĠworld"  # raw byte-level pieces
    assert plain["token_strs"] is None


async def test_tokenize_messages_form(scripted: ClientFactory):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    template = get_chat_template()
    async with scripted() as (client, _):
        default = (
            await client.post("/tokenize", json={"messages": messages[:1], "tools": TOOLS})
        ).json()
        cont = (
            await client.post(
                "/tokenize",
                json={
                    "messages": messages,
                    "add_generation_prompt": False,
                    "continue_final_message": True,
                },
            )
        ).json()
        both = await client.post(
            "/tokenize", json={"messages": messages, "continue_final_message": True}
        )
        empty_tools = (
            await client.post("/tokenize", json={"messages": messages[:1], "tools": []})
        ).json()
    assert default["tokens"] == template.encode(messages[:1], TOOLS, add_generation_prompt=True)
    assert get_tokenizer().decode(cont["tokens"]).endswith("<|im_start|>assistant\nHel")
    assert both.status_code == 400
    assert both.json()["error"]["message"] == (
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    )
    assert empty_tools["tokens"] == template.encode(messages[:1], add_generation_prompt=True)


async def test_detokenize(scripted: ClientFactory):
    tok = get_tokenizer()
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>")
    async with scripted() as (client, _):
        r = await client.post("/detokenize", json={"model": "policy", "tokens": ids})
        oov = await client.post("/detokenize", json={"tokens": [tok.vocab_size]})
    assert r.json() == {"prompt": "<|im_start|>user\nHi<|im_end|>"}
    assert oov.status_code == 400
    assert oov.json()["error"]["message"] == f"Token id {tok.vocab_size} is out of vocabulary"


async def test_models_version_health(scripted: ClientFactory):
    async with scripted(model="qwen-test", max_model_len=2048, version="0.2x") as (client, _):
        models = (await client.get("/v1/models")).json()
        version = (await client.get("/version")).json()
        health = await client.get("/health")
        bad_model = await client.post("/tokenize", json={"model": "policy", "prompt": "x"})
    card = models["data"][0]
    assert models["object"] == "list"
    assert (card["id"], card["object"], card["owned_by"], card["max_model_len"]) == (
        "qwen-test",
        "model",
        "vllm",
        2048,
    )
    assert card["parent"] is None
    assert version == {"version": "0.26.0"}
    assert health.status_code == 200 and health.content == b""
    assert bad_model.status_code == 404
    assert bad_model.json()["error"]["message"] == "The model `policy` does not exist."


async def test_fault_switch_makes_health_503_and_generation_500(scripted: ClientFactory):
    async with scripted() as (client, _):
        await client.post("/scripted/fault", json={"healthy": False})
        health = await client.get("/health")
        gen = await client.post("/v1/completions", json={"prompt": [1, 2]})
        await client.post("/scripted/fault", json={"healthy": True, "fail_rate": 1.0})
        flaky = await client.post("/v1/completions", json={"prompt": [1, 2]})
        await client.post("/scripted/fault", json={"fail_rate": 0.0})
        ok = await client.post("/v1/completions", json={"prompt": [1, 2]})
    assert health.status_code == 503
    assert gen.status_code == 500 and gen.json()["error"] == {
        "message": "Internal server error",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    assert flaky.status_code == 500 and ok.status_code == 200


async def test_metrics_count_tokens_and_finishes(scripted: ClientFactory):
    async with scripted() as (client, _):
        await client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        text = (await client.get("/metrics")).text
        load = (await client.get("/load")).json()
    assert 'vllm:num_requests_running{engine="0",model_name="policy"} 0.0' in text
    assert 'vllm:num_requests_waiting{engine="0",model_name="policy"} 0.0' in text
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="policy"} 0.0' in text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="policy"} 3.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="policy"} 2.0' in text
    assert 'finished_reason="length"} 1.0' in text
    assert load == {"server_load": 0}


async def test_scripted_info(scripted: ClientFactory):
    tok = get_tokenizer()
    async with scripted(policy="math") as (client, _):
        info = (await client.get("/scripted/info")).json()
    assert info["eos_token_id"] == tok.eos_token_id and info["vocab_size"] == tok.vocab_size
    assert info["policy"] == ["math"]


def test_public_surface_is_sorted_and_importable() -> None:
    import agentroll.testing.scripted_llm as pkg

    assert pkg.__all__ == sorted(pkg.__all__, key=lambda n: (not n.isupper(), n))
    assert all(hasattr(pkg, name) for name in pkg.__all__)
