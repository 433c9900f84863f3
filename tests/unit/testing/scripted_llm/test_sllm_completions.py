"""`POST /v1/completions` against docs/protocol.md §2, §8 and §10."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from agentroll.handlers.builtin.math import load_math_tasks
from agentroll.testing.scripted_llm import get_tokenizer

ClientFactory = Callable[..., Any]  # the `scripted` fixture (conftest.py)

ChatIds = Callable[[str], list[int]]

CHOICE_KEYS_033 = [
    "index",
    "text",
    "logprobs",
    "finish_reason",
    "stop_reason",
    "token_ids",
    "prompt_logprobs",
    "prompt_token_ids",
    "routed_experts",
    "weight_versions",
]
BODY_KEYS_033 = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
]


def sse_events(text: str) -> list[Any]:
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_non_streaming_shape_and_nulls_033(scripted: ClientFactory, chat_ids: ChatIds):
    async with scripted() as (client, _):
        prompt = chat_ids("Repeat after me: Hello there")
        r = await client.post("/v1/completions", json={"model": "policy", "prompt": prompt})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == BODY_KEYS_033
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    choice = body["choices"][0]
    assert list(choice) == CHOICE_KEYS_033
    assert choice["text"] == "Hello there"
    assert choice["token_ids"] is None and choice["prompt_token_ids"] is None
    assert choice["logprobs"] is None and choice["weight_versions"] is None
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", None)
    assert body["usage"] == {
        "prompt_tokens": len(prompt),
        "total_tokens": body["usage"]["total_tokens"],
        "completion_tokens": body["usage"]["completion_tokens"],
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    assert body["usage"]["total_tokens"] == len(prompt) + body["usage"]["completion_tokens"]


@pytest.mark.parametrize(
    ("version", "missing_choice", "missing_body"),
    [
        ("0.11", {"routed_experts", "weight_versions"}, {"ec_transfer_params", "metrics"}),
        ("0.2x", {"weight_versions"}, set()),
    ],
)
async def test_older_versions_have_fewer_keys(
    scripted: ClientFactory, version: str, missing_choice: set[str], missing_body: set[str]
):
    async with scripted(version=version) as (client, _):
        body = (await client.post("/v1/completions", json={"prompt": [1, 2, 3]})).json()
    assert set(body) == set(BODY_KEYS_033) - missing_body
    assert set(body["choices"][0]) == set(CHOICE_KEYS_033) - missing_choice
    assert ("completion_tokens_details" in body["usage"]) is (version != "0.11")


async def test_token_ids_logprobs_and_token_id_strings(scripted: ClientFactory, chat_ids: ChatIds):
    tok = get_tokenizer()
    async with scripted() as (client, _):
        prompt = chat_ids("Repeat after me: The quick brown fox jumps.")
        r = await client.post(
            "/v1/completions",
            json={
                "prompt": prompt,
                "max_tokens": 64,
                "logprobs": 2,
                "return_token_ids": True,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": False,
                "seed": 7,
            },
        )
    choice = r.json()["choices"][0]
    ids = choice["token_ids"]
    assert choice["prompt_token_ids"] == prompt
    assert ids[-1] == tok.eos_token_id and ids.count(tok.eos_token_id) == 1
    assert choice["text"] == "The quick brown fox jumps."  # the stop token's text is dropped
    assert tok.decode(ids[:-1]) == choice["text"]
    lp = choice["logprobs"]
    assert lp["tokens"] == [f"token_id:{i}" for i in ids]
    assert len(lp["token_logprobs"]) == len(ids)
    assert all(-9999.0 <= x < 0 for x in lp["token_logprobs"])
    offsets = [0]
    for token in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(token))
    assert lp["text_offset"] == offsets
    for token, value, top in zip(
        lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True
    ):
        assert next(iter(top.items())) == (token, value)  # sampled token first
        assert len(top) in (2, 3)  # k entries when it is in the top-k, else k + 1


async def test_decoded_tokens_when_not_token_id_strings(scripted: ClientFactory):
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions",
            json={"prompt": "Repeat after me: naïve café", "logprobs": 0, "max_tokens": 30},
        )
    lp = r.json()["choices"][0]["logprobs"]
    assert all(len(top) == 1 for top in lp["top_logprobs"])
    assert "".join(lp["tokens"][:-1]).replace("\ufffd", "") != ""
    assert lp["tokens"][-1] == "<|im_end|>"


async def test_policy_output_is_not_canonical_over_the_wire(
    scripted: ClientFactory, chat_ids: ChatIds
):
    task = load_math_tasks()[0]
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions",
            json={"prompt": chat_ids(task.question), "max_tokens": 400, "return_token_ids": True},
        )
        ids = r.json()["choices"][0]["token_ids"][:-1]
        text = (await client.post("/detokenize", json={"tokens": ids})).json()["prompt"]
        again = (await client.post("/tokenize", json={"prompt": text})).json()["tokens"]
    assert text == r.json()["choices"][0]["text"]
    assert again != ids and len(again) < len(ids)


async def test_max_tokens_gives_length_without_eos(scripted: ClientFactory, chat_ids: ChatIds):
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions",
            json={
                "prompt": chat_ids("Repeat after me: one two three four five six seven"),
                "max_tokens": 3,
                "return_token_ids": True,
            },
        )
    choice = r.json()["choices"][0]
    assert len(choice["token_ids"]) == 3
    assert get_tokenizer().eos_token_id not in choice["token_ids"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("length", None)


async def test_default_max_tokens_is_16(scripted: ClientFactory, chat_ids: ChatIds):
    task = load_math_tasks()[0]
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions",
            json={"prompt": chat_ids(task.question), "max_tokens": None, "return_token_ids": True},
        )
    assert len(r.json()["choices"][0]["token_ids"]) == 16


async def test_stop_reasons(scripted: ClientFactory, chat_ids: ChatIds):
    tok = get_tokenizer()
    prompt = chat_ids("Repeat after me: alpha beta gamma delta")
    async with scripted() as (client, _):
        base = {"prompt": prompt, "return_token_ids": True, "seed": 1}
        full = (await client.post("/v1/completions", json=base)).json()["choices"][0]
        stop_id = full["token_ids"][2]
        by_id = (
            await client.post("/v1/completions", json={**base, "stop_token_ids": [stop_id]})
        ).json()
        by_eos = (
            await client.post(
                "/v1/completions", json={**base, "stop_token_ids": [tok.eos_token_id]}
            )
        ).json()
        by_str = (await client.post("/v1/completions", json={**base, "stop": "gamma"})).json()
    c = by_id["choices"][0]
    assert (c["finish_reason"], c["stop_reason"]) == ("stop", stop_id)
    assert c["token_ids"] == full["token_ids"][:3]
    assert by_eos["choices"][0]["stop_reason"] is None  # the EOS check comes first
    c = by_str["choices"][0]
    assert (c["finish_reason"], c["stop_reason"], c["text"]) == ("stop", "gamma", "alpha beta ")
    assert tok.decode(c["token_ids"]).endswith("gamma")  # ids keep every sampled token


async def test_batch_and_n_ordering(scripted: ClientFactory, chat_ids: ChatIds):
    prompts = [chat_ids("Repeat after me: first"), chat_ids("Repeat after me: second")]
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions", json={"prompt": prompts, "n": 2, "return_token_ids": True, "seed": 3}
        )
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in body["choices"]] == ["first", "first", "second", "second"]
    assert [c["prompt_token_ids"] for c in body["choices"]] == [prompts[0]] * 2 + [prompts[1]] * 2
    assert body["choices"][0]["token_ids"] != body["choices"][1]["token_ids"] or (
        body["choices"][0]["text"] == body["choices"][1]["text"]
    )
    assert body["usage"]["prompt_tokens"] == len(prompts[0]) + len(prompts[1])
    assert body["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in body["choices"])


async def test_string_prompts_are_tokenized(scripted: ClientFactory):
    async with scripted() as (client, _):
        one = (
            await client.post(
                "/v1/completions", json={"prompt": "Repeat after me: hi", "return_token_ids": True}
            )
        ).json()
        two = (
            await client.post(
                "/v1/completions", json={"prompt": ["Repeat after me: a", "Repeat after me: b"]}
            )
        ).json()
    assert one["choices"][0]["prompt_token_ids"] == get_tokenizer().encode("Repeat after me: hi")
    assert [c["text"] for c in two["choices"]] == ["a", "b"]


async def test_determinism_by_seed_and_greedy(scripted: ClientFactory, chat_ids: ChatIds):
    prompt = chat_ids(load_math_tasks()[3].question)

    async def ask(client: Any, **extra: Any) -> tuple[list[int], list[float]]:
        r = await client.post(
            "/v1/completions",
            json={
                "prompt": prompt,
                "max_tokens": 200,
                "return_token_ids": True,
                "logprobs": 0,
                **extra,
            },
        )
        c = r.json()["choices"][0]
        return c["token_ids"], c["logprobs"]["token_logprobs"]

    async with scripted() as (client, _):
        seeded = [await ask(client, seed=5), await ask(client, seed=5)]
        other = await ask(client, seed=6)
        unseeded = [await ask(client), await ask(client)]
        greedy = [await ask(client, temperature=0), await ask(client, temperature=0, seed=1)]
    async with scripted() as (fresh, _):  # another server: same answers for the same seed
        assert await ask(fresh, seed=5) == seeded[0]
    assert seeded[0] == seeded[1] and other != seeded[0]
    assert unseeded[0] != unseeded[1]
    assert greedy[0] == greedy[1]


async def test_request_id_header_and_field(scripted: ClientFactory):
    async with scripted() as (client, _):
        by_field = await client.post("/v1/completions", json={"prompt": [5], "request_id": "abc"})
        by_header = await client.post(
            "/v1/completions",
            json={"prompt": [5], "request_id": "x"},
            headers={"X-Request-Id": "hdr"},
        )
    assert by_field.json()["id"] == "cmpl-abc"
    assert by_header.json()["id"] == "cmpl-hdr"


async def test_errors_use_vllm_envelope_with_400_not_422(scripted: ClientFactory):
    async with scripted() as (client, _):
        bad_type = await client.post("/v1/completions", json={"prompt": [1], "max_tokens": "x"})
        no_prompt = await client.post("/v1/completions", json={"max_tokens": 3})
        not_json = await client.post(
            "/v1/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        oov = await client.post("/v1/completions", json={"prompt": [1, 10**6]})
        negative = await client.post("/v1/completions", json={"prompt": [1, -2]})
        empty = await client.post("/v1/completions", json={"prompt": []})
        model = await client.post("/v1/completions", json={"prompt": [1], "model": "gpt"})
        cap = await client.post("/v1/completions", json={"prompt": [1], "logprobs": 21})
        zero = await client.post("/v1/completions", json={"prompt": [1], "max_tokens": 0})
        unknown = await client.post("/v1/completions", json={"prompt": [1], "bogus_field": 1})
        min_gt_max = await client.post(
            "/v1/completions", json={"prompt": [1], "max_tokens": 2, "min_tokens": 3}
        )
    for r in (bad_type, no_prompt, not_json, negative):
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "Bad Request"
        assert r.json()["error"]["message"].startswith("1 validation error")
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert oov.status_code == 400
    assert oov.json()["error"] == {
        "message": "Token id 1000000 is out of vocabulary",
        "type": "BadRequestError",
        "param": "prompt",
        "code": 400,
    }
    assert empty.status_code == 400
    assert model.status_code == 404
    assert model.json()["error"]["message"] == (
        "The model `gpt` does not exist. Valid aliases: policy."
    )
    assert model.json()["error"]["type"] == "NotFoundError"
    assert cap.json()["error"]["message"] == (
        "Requested sample logprobs of 21, which is greater than max allowed: 20"
    )
    assert zero.json()["error"]["message"] == "max_tokens must be at least 1, got 0."
    assert unknown.status_code == 200
    assert min_gt_max.json()["error"]["message"] == (
        "min_tokens must be less than or equal to max_tokens=2, got 3."
    )


CONTEXT_CASES = [
    # version, prompt length, max_tokens, expected message (None: accepted)
    ("0.33", 90, 50, None),
    (
        "0.33",
        101,
        1,
        "This model's maximum context length is 100 tokens. However, your prompt "
        "contains 101 input tokens, which exceeds this limit even without any output tokens. "
        "Please reduce the length of the input prompt.",
    ),
    ("0.33", 100, 5, "max_tokens must be at least 1, got 0."),
    (
        "0.33",
        10,
        150,
        "max_tokens=150 cannot be greater than max_model_len=100. Please request "
        "fewer output tokens.",
    ),
    (
        "0.2x",
        90,
        50,
        "This model's maximum context length is 100 tokens. However, you requested "
        "50 output tokens and your prompt contains 90 input tokens, for a total of 140 tokens. "
        "Please reduce the length of the input prompt or the number of requested output tokens.",
    ),
    ("0.2x", 90, 10, None),
    (
        "0.11",
        90,
        50,
        "This model's maximum context length is 50 tokens. However, your request "
        "has 90 input tokens. Please reduce the length of the input messages.",
    ),
]


@pytest.mark.parametrize(("version", "prompt_len", "max_tokens", "message"), CONTEXT_CASES)
async def test_context_length_rules_per_version(
    scripted: ClientFactory, version: str, prompt_len: int, max_tokens: int, message: str | None
):
    async with scripted(version=version, max_model_len=100) as (client, _):
        r = await client.post(
            "/v1/completions",
            json={
                "prompt": [300] * prompt_len,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "return_token_ids": True,
            },
        )
    if message is None:
        assert r.status_code == 200
        ids = r.json()["choices"][0]["token_ids"]
        assert len(ids) == min(max_tokens, 100 - prompt_len)  # 0.33 clamps silently
        assert r.json()["choices"][0]["finish_reason"] == "length"
    else:
        assert r.status_code == 400
        assert r.json()["error"]["message"] == message
        assert r.json()["error"]["type"] == "BadRequestError"
        assert "maximum context length" in message or "max_tokens" in message


async def test_streaming_matches_non_streaming(scripted: ClientFactory, chat_ids: ChatIds):
    prompt = chat_ids(load_math_tasks()[6].question)
    request = {
        "prompt": prompt,
        "max_tokens": 300,
        "seed": 11,
        "return_token_ids": True,
        "logprobs": 1,
    }
    async with scripted() as (client, _):
        full = (await client.post("/v1/completions", json=request)).json()["choices"][0]
        r = await client.post(
            "/v1/completions",
            json={**request, "stream": True, "stream_options": {"include_usage": True}},
        )
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = sse_events(r.text)
    usage, chunks = chunks[-1], chunks[:-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(full["token_ids"])
    choices = [c["choices"][0] for c in chunks]
    assert choices[0]["prompt_token_ids"] == prompt
    assert all("prompt_token_ids" not in c for c in choices[1:])
    assert all("routed_experts" not in c for c in choices)  # exclude_unset in streams
    assert [i for c in choices for i in c["token_ids"]] == full["token_ids"]
    assert "".join(c["text"] for c in choices) == full["text"]
    assert [c["finish_reason"] for c in choices[:-1]] == [None] * (len(choices) - 1)
    assert choices[-1]["finish_reason"] == "stop"
    streamed_lps = [x for c in choices for x in c["logprobs"]["token_logprobs"]]
    assert streamed_lps == full["logprobs"]["token_logprobs"]
    offsets = [x for c in choices for x in c["logprobs"]["text_offset"]]
    assert offsets == full["logprobs"]["text_offset"]


async def test_streaming_validation_errors_are_plain_http_errors(scripted: ClientFactory):
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions", json={"prompt": [1], "stream": True, "model": "other"}
        )
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


async def test_request_log_shows_exactly_what_was_returned(
    scripted: ClientFactory, chat_ids: ChatIds
):
    async with scripted(request_log_size=2) as (client, _):
        for word in ("one", "two", "three"):
            r = await client.post(
                "/v1/completions",
                json={
                    "prompt": chat_ids(f"Repeat after me: {word}"),
                    "return_token_ids": True,
                    "logprobs": 0,
                },
            )
        log = (await client.get("/scripted/requests")).json()["requests"]
        last = (await client.get("/scripted/requests?limit=1")).json()["requests"]
        await client.delete("/scripted/requests")
        cleared = (await client.get("/scripted/requests")).json()["requests"]
    choice = r.json()["choices"][0]
    assert len(log) == 2 and last == log[-1:] and cleared == []
    entry = log[-1]
    assert entry["id"] == r.json()["id"] and entry["text"] == "three"
    assert entry["token_ids"] == choice["token_ids"]
    assert entry["prompt_token_ids"] == choice["prompt_token_ids"]
    assert entry["logprobs"] == choice["logprobs"]["token_logprobs"]
    assert entry["finish_reason"] == "stop"


async def test_prompt_logprobs_shape(scripted: ClientFactory):
    async with scripted() as (client, _):
        r = await client.post(
            "/v1/completions", json={"prompt": [10, 20, 30], "max_tokens": 1, "prompt_logprobs": 0}
        )
        streamed = await client.post(
            "/v1/completions", json={"prompt": [10], "stream": True, "prompt_logprobs": 0}
        )
    plp = r.json()["choices"][0]["prompt_logprobs"]
    assert plp[0] is None and [list(e) for e in plp[1:]] == [["20"], ["30"]]
    assert set(plp[1]["20"]) == {"logprob", "rank", "decoded_token"}
    assert plp[1]["20"]["logprob"] < 0
    assert streamed.status_code == 400
