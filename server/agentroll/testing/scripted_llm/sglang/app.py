"""The HTTP face of the scripted backend in SGLang mode (`ScriptedLLMConfig(flavor="sglang")`).

Routes per docs/protocol.md §9 for 0.5.23 and 0.5.2: `/generate`, `/pause_generation`,
`/continue_generation`, `/health`, `/health_generate`, `/get_model_info` (+ `/model_info`,
`/tokenize`, `/detokenize` in 0.5.23), `/flush_cache`, `/abort_request`,
`/update_weight_version` and `/v1/models`.

Errors use SGLang's native envelope `{"error": {"message": ...}}` (bare string for 0.5.23's
sampling contract). Pause modes map onto the shared engine: `abort` aborts and waits until
nothing is in flight; `retract` and `in_place` freeze in-flight requests until continue (the
double does not model recomputation after a retract). While paused, new requests are held and
`/health`, `/health_generate` and `/ready` answer 503 (the real health check runs a generation,
which is held until its timeout).
"""

import asyncio
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import PlainTextResponse, Response

from agentroll.testing.scripted_llm.common import engine_of, json_response
from agentroll.testing.scripted_llm.config import ScriptedLLMConfig
from agentroll.testing.scripted_llm.engine import Engine
from agentroll.testing.scripted_llm.errors import ContractError, ProtocolError
from agentroll.testing.scripted_llm.policy import Policy
from agentroll.testing.scripted_llm.sglang.generate import create_generation
from agentroll.testing.scripted_llm.sglang.protocol import (
    AbortRequest,
    DetokenizeRequest,
    PauseGenerationRequest,
    TokenizeRequest,
    UpdateWeightVersionRequest,
    parse,
)
from agentroll.testing.scripted_llm.template import get_chat_template
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer

PAUSE_TIMEOUT_S = 300.0
SGLANG_PAUSE_MODES = {"abort": "abort", "retract": "keep", "in_place": "keep"}


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return await request.json()
    except ValueError as exc:
        raise ProtocolError(f"invalid JSON body: {exc}") from exc


def create_sglang_app(config: ScriptedLLMConfig, policy: Policy) -> FastAPI:
    """SGLang's routes for `config.sglang_version`, answering with `policy`."""
    app = FastAPI(
        title="agentroll scripted LLM (SGLang protocol double)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.engine = Engine(
        config, get_tokenizer(), get_chat_template(config.chat_template), policy
    )

    @app.exception_handler(ProtocolError)
    async def _protocol_error(request: Request, exc: ProtocolError) -> Response:
        if isinstance(exc, ContractError):
            return json_response(exc.envelope(), exc.status)
        return json_response({"error": {"message": exc.message}}, exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return json_response({"error": {"message": str(exc.errors())}}, 400)

    _generation_routes(app)
    _info_routes(app)
    if config.sglang_version == "0.5.23":
        _tokenizer_routes(app)
    return app


def _generation_routes(app: FastAPI) -> None:
    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        return await create_generation(engine_of(request), await _body(request))

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> Response:
        engine = engine_of(request)
        mode = "abort"  # 0.5.2 takes no body and always aborts
        if engine.config.sglang_version == "0.5.23":
            mode = parse(PauseGenerationRequest, await _body(request)).mode
            if mode not in SGLANG_PAUSE_MODES:
                raise ProtocolError(
                    f"Invalid pause mode {mode!r}; expected one of {', '.join(SGLANG_PAUSE_MODES)}."
                )
        await engine.pause(SGLANG_PAUSE_MODES[mode], PAUSE_TIMEOUT_S)
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    @app.post("/continue_generation")
    async def continue_generation(request: Request) -> Response:
        engine = engine_of(request)
        await asyncio.sleep(engine.config.resume_delay_s)
        engine.resume()
        return json_response({"message": "Generation continued successfully.", "status": "ok"})

    @app.api_route("/abort_request", methods=["POST"])
    async def abort_request(request: Request) -> Response:
        req = parse(AbortRequest, await _body(request))
        if req.abort_all or req.rid:
            engine_of(request).abort(None if req.abort_all else [req.rid], prefix=True)
        return Response(status_code=200)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache(request: Request) -> Response:
        engine = engine_of(request)
        if engine.running or engine.waiting:
            return PlainTextResponse(
                "Cache not flushed. Please check if there are running or waiting requests.", 400
            )
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details.")

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request) -> Response:
        engine = engine_of(request)
        req = parse(UpdateWeightVersionRequest, await _body(request))
        if req.abort_all_requests:
            engine.abort(None)
        engine.set_weight_version(req.new_version)
        return json_response({"success": True, "new_version": req.new_version})


def _health(engine: Engine) -> Response:
    return Response(status_code=200 if engine.healthy and not engine.paused else 503)


def _info_routes(app: FastAPI) -> None:
    @app.get("/health")
    async def health(request: Request) -> Response:
        return _health(engine_of(request))

    @app.get("/health_generate")
    async def health_generate(request: Request) -> Response:
        return _health(engine_of(request))

    @app.get("/ready")
    async def ready(request: Request) -> Response:
        return _health(engine_of(request))

    @app.get("/get_model_info")
    async def get_model_info(request: Request) -> Response:
        return json_response(_model_info(engine_of(request)))

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        engine = engine_of(request)
        card = {
            "id": engine.config.model,
            "object": "model",
            "created": int(engine.started_at),
            "owned_by": "sglang",
            "root": engine.config.model,
            "max_model_len": engine.config.max_model_len,
        }
        return json_response({"object": "list", "data": [card]})

    if app.state.engine.config.sglang_version == "0.5.23":

        @app.get("/model_info")
        async def model_info(request: Request) -> Response:
            return json_response(_model_info(engine_of(request)))


def _model_info(engine: Engine) -> dict[str, Any]:
    cfg = engine.config
    info: dict[str, Any] = {
        "model_path": cfg.model,
        "tokenizer_path": cfg.tokenizer_path or cfg.model,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": engine.weight_version,
    }
    if cfg.sglang_version == "0.5.23":
        info.update(
            served_model_name=cfg.model,
            load_format="auto",
            reasoning_parser=None,
            tool_call_parser=None,
            disaggregation_mode="null",
            has_image_understanding=False,
            has_audio_understanding=False,
            model_type="qwen2",
            architectures=["Qwen2ForCausalLM"],
        )
    return info


def _tokenizer_routes(app: FastAPI) -> None:
    @app.post("/tokenize")
    @app.post("/v1/tokenize")
    async def tokenize(request: Request) -> Response:
        engine = engine_of(request)
        req = parse(TokenizeRequest, await _body(request))
        if (req.prompt is None) == (req.messages is None):
            raise ProtocolError("Exactly one of 'prompt' or 'messages' must be provided.")
        limit = engine.config.max_model_len
        if req.messages is not None:
            try:
                ids = engine.template.encode(req.messages, req.tools, req.add_generation_prompt)
            except Exception as exc:  # jinja errors, malformed messages: the caller's fault
                raise ProtocolError(f"Failed to apply the chat template: {exc}") from exc
            return json_response({"tokens": ids, "count": len(ids), "max_model_len": limit})
        if isinstance(req.prompt, list):
            batch = [engine.tokenizer.encode(p) for p in req.prompt]
            counts = [len(ids) for ids in batch]
            return json_response({"tokens": batch, "count": counts, "max_model_len": limit})
        ids = engine.tokenizer.encode(req.prompt or "")
        return json_response({"tokens": ids, "count": len(ids), "max_model_len": limit})

    @app.post("/detokenize")
    @app.post("/v1/detokenize")
    async def detokenize(request: Request) -> Response:
        engine = engine_of(request)
        req = parse(DetokenizeRequest, await _body(request))
        bad = [t for t in req.tokens if not engine.tokenizer.is_valid_id(t)]
        if bad:
            raise ProtocolError(f"Token id {bad[0]} is out of vocabulary")
        text = engine.tokenizer.decode(req.tokens, skip_special_tokens=req.skip_special_tokens)
        return json_response({"text": text})
