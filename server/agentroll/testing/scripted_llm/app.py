"""The HTTP face of the scripted backend: vLLM's routes (`vllm/`) or SGLang's (`sglang/`).

`create_app(config)` builds a FastAPI app whose state lives on `app.state.engine`, for the
protocol `config.flavor` names.

Test-double extensions, not part of either protocol, all under `/scripted/`:
`GET /scripted/requests` (what the backend returned, per choice; `?limit=N`; and under
`received` the prompt of every generation request that arrived, refused ones too),
`DELETE /scripted/requests`, `GET /scripted/info` (tokenizer facts), `POST /scripted/fault`.
"""

from fastapi import FastAPI, Request
from pydantic import Field
from starlette.responses import Response

from agentroll.testing.scripted_llm.common import LenientModel, engine_of, json_response
from agentroll.testing.scripted_llm.config import ScriptedLLMConfig
from agentroll.testing.scripted_llm.policy import RuleRegistry, default_rules
from agentroll.testing.scripted_llm.sglang.app import create_sglang_app
from agentroll.testing.scripted_llm.vllm.app import create_vllm_app
from agentroll.testing.scripted_llm.vllm.protocol import parse_body, read_body


def create_app(config: ScriptedLLMConfig, rules: RuleRegistry | None = None) -> FastAPI:
    """A fresh app (and engine). `rules` lets callers add their own scripted rules."""
    policy = (rules or default_rules()).chain(config.policy)
    if config.flavor == "sglang":
        app = create_sglang_app(config, policy)
    else:
        app = create_vllm_app(config, policy)
    scripted_routes(app)
    return app


class FaultRequest(LenientModel):
    """`POST /scripted/fault` (test-double extension): flip health / failure rate, or fail
    the next `fail_next` generation requests (a transient hiccup)."""

    healthy: bool | None = None
    fail_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    fail_next: int | None = Field(default=None, ge=0)


def scripted_routes(app: FastAPI) -> None:
    """The `/scripted/*` test-double extensions."""

    @app.get("/scripted/requests")
    async def requests_log(request: Request) -> Response:
        engine = engine_of(request)
        limit = int(request.query_params.get("limit", "0") or 0)
        entries = list(engine.log)[-limit:] if limit > 0 else list(engine.log)
        out = [
            {
                k: (list(v) if k in ("prompt_token_ids", "token_ids", "logprobs") else v)
                for k, v in e.items()
            }
            for e in entries
        ]
        return json_response({"requests": out, "received": list(engine.received)})

    @app.delete("/scripted/requests")
    async def clear_log(request: Request) -> Response:
        engine_of(request).log.clear()
        engine_of(request).received.clear()
        return json_response({"cleared": True})

    @app.get("/scripted/info")
    async def info(request: Request) -> Response:
        engine = engine_of(request)
        tok = engine.tokenizer
        return json_response(
            {
                "flavor": engine.config.flavor,
                "version": engine.config.version
                if engine.config.flavor == "vllm"
                else engine.config.sglang_version,
                "model": engine.config.model,
                "vocab_size": tok.vocab_size,
                "eos_token_id": tok.eos_token_id,
                "special_token_ids": sorted(tok.special_ids),
                "policy": engine.config.policy,
                "weight_version": engine.weight_version,
            }
        )

    @app.post("/scripted/fault")
    async def fault(request: Request) -> Response:
        engine = engine_of(request)
        req = parse_body(FaultRequest, await read_body(request), engine.config.version)
        if req.healthy is not None:
            engine.healthy = req.healthy
        if req.fail_rate is not None:
            engine.fail_rate = req.fail_rate
        if req.fail_next is not None:
            engine.fail_next = req.fail_next
        return json_response({"healthy": engine.healthy, "fail_rate": engine.fail_rate})
