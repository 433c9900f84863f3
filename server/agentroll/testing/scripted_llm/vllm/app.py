"""vLLM's routes, per protocol version: completions, tokenize, health and info, and the
pause / weight-version control routes (0.2x and later)."""

import asyncio

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import PlainTextResponse, Response

from agentroll.testing.scripted_llm.common import engine_of, json_response
from agentroll.testing.scripted_llm.config import ScriptedLLMConfig
from agentroll.testing.scripted_llm.engine import PAUSE_MODES, Engine
from agentroll.testing.scripted_llm.errors import ProtocolError
from agentroll.testing.scripted_llm.metrics import render_metrics
from agentroll.testing.scripted_llm.policy import Policy
from agentroll.testing.scripted_llm.template import BOTH_PROMPT_FLAGS, get_chat_template
from agentroll.testing.scripted_llm.tokenizer import get_tokenizer
from agentroll.testing.scripted_llm.vllm.completions import check_model, create_completion
from agentroll.testing.scripted_llm.vllm.protocol import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    WeightVersionRequest,
    parse_body,
    read_body,
)

PAUSE_TIMEOUT_S = 300.0


def _before_mode_param(release: str) -> bool:
    parts = tuple(int(p) for p in release.split(".")[:2])
    return parts < (0, 20)


def create_vllm_app(config: ScriptedLLMConfig, policy: Policy) -> FastAPI:
    """vLLM's routes for `config.version`, answering with `policy`."""
    tokenizer = get_tokenizer()
    app = FastAPI(
        title="agentroll scripted LLM (vLLM protocol double)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.engine = Engine(config, tokenizer, get_chat_template(config.chat_template), policy)

    @app.exception_handler(ProtocolError)
    async def _protocol_error(request: Request, exc: ProtocolError) -> Response:
        return json_response(exc.envelope(), exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        err = ProtocolError(
            f"{len(exc.errors())} validation error(s): {exc.errors()}", err_type="Bad Request"
        )
        return json_response(err.envelope(), 400)

    _data_routes(app)
    _info_routes(app)
    if config.version != "0.11":
        _control_routes(app)
    return app


def _data_routes(app: FastAPI) -> None:
    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await create_completion(
            engine_of(request), await read_body(request), request.headers.get("x-request-id")
        )

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        engine = engine_of(request)
        body = await read_body(request)
        version = engine.config.version
        if isinstance(body, dict) and "messages" in body:
            chat = parse_body(TokenizeChatRequest, body, version)
            check_model(engine, chat.model)
            if chat.add_generation_prompt and chat.continue_final_message:
                raise ProtocolError(BOTH_PROMPT_FLAGS)
            try:
                ids = engine.template.encode(
                    chat.messages,
                    chat.tools or None,
                    chat.add_generation_prompt,
                    chat.continue_final_message,
                )
            except Exception as exc:  # jinja errors, malformed messages: the caller's fault
                raise ProtocolError(f"Failed to apply the chat template: {exc}") from exc
            want_strs = chat.return_token_strs
        else:
            plain = parse_body(TokenizeCompletionRequest, body, version)
            check_model(engine, plain.model)
            ids = engine.tokenizer.encode(plain.prompt)
            want_strs = plain.return_token_strs
        pieces = engine.tokenizer.pieces
        return json_response(
            {
                "count": len(ids),
                "max_model_len": engine.config.max_model_len,
                "tokens": ids,
                "token_strs": [pieces[i] for i in ids] if want_strs else None,
            }
        )

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        engine = engine_of(request)
        req = parse_body(DetokenizeRequest, await read_body(request), engine.config.version)
        check_model(engine, req.model)
        bad = [t for t in req.tokens if not engine.tokenizer.is_valid_id(t)]
        if bad:
            raise ProtocolError(f"Token id {bad[0]} is out of vocabulary", param="tokens")
        return json_response({"prompt": engine.tokenizer.decode(req.tokens)})


def _info_routes(app: FastAPI) -> None:
    @app.get("/health")
    async def health(request: Request) -> Response:
        return Response(status_code=200 if engine_of(request).healthy else 503)

    @app.get("/ping")
    async def ping(request: Request) -> Response:
        return await health(request)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        cfg = engine_of(request).config
        created = int(engine_of(request).started_at)
        permission = {
            "id": f"modelperm-{cfg.model}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": cfg.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": cfg.model,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [permission],
        }
        return json_response({"object": "list", "data": [card]})

    @app.get("/version")
    async def version(request: Request) -> Response:
        return json_response({"version": engine_of(request).config.reported_release})

    @app.get("/load")
    async def load(request: Request) -> Response:
        engine = engine_of(request)
        return json_response({"server_load": len(engine.running) + engine.waiting})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        return PlainTextResponse(
            render_metrics(engine_of(request)), media_type="text/plain; version=0.0.4"
        )

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache(request: Request) -> Response:
        if engine_of(request).config.version == "0.11":
            return Response(status_code=200)
        return json_response({"success": True})


def _control_routes(app: FastAPI) -> None:
    @app.get("/server_info")
    async def server_info(request: Request) -> Response:
        """Dev mode's config dump, with the fields agentroll reads (vLLM prints the whole
        config as text unless `config_format=json`)."""
        cfg = engine_of(request).config
        model_config = {
            "model": cfg.model,
            "served_model_name": cfg.model,
            "max_model_len": cfg.max_model_len,
            "logprobs_mode": cfg.logprobs_mode,
        }
        aux = {"enable_return_routed_experts": cfg.moe is not None, "max_bytes": None}
        if request.query_params.get("config_format", "text") == "json":
            config: object = {"model_config": model_config, "aux_output_config": aux}
        else:
            config = ", ".join(f"{k}={v}" for k, v in model_config.items())
        env = {"VLLM_SERVER_DEV_MODE": True}
        return json_response({"vllm_config": config, "vllm_env": env, "system_env": {}})

    @app.post("/pause")
    async def pause(request: Request) -> Response:
        engine = engine_of(request)
        query = request.query_params
        mode = query.get("mode")
        legacy = query.get("wait_for_inflight_requests")
        if _before_mode_param(engine.config.reported_release):
            # 0.12-0.19 know only the flag (default false = abort); `mode` is ignored
            mode = "wait" if (legacy or "").lower() in ("1", "true") else "abort"
        elif mode is None and legacy is not None and engine.config.version == "0.2x":
            mode = "wait" if legacy.lower() in ("1", "true") else "abort"
        mode = mode or "abort"  # 0.33 ignores the legacy flag: silently abort mode
        if mode not in PAUSE_MODES:
            return json_response(
                {"error": f"Invalid mode '{mode}'. Expected one of {', '.join(PAUSE_MODES)}."}, 400
            )
        try:
            await engine.pause(mode, PAUSE_TIMEOUT_S)
        except TimeoutError:
            return json_response(
                {"error": "Failed to pause generation: timed out waiting for in-flight requests"},
                500,
            )
        return json_response({"status": "paused"})

    @app.post("/resume")
    async def resume(request: Request) -> Response:
        engine = engine_of(request)
        await asyncio.sleep(engine.config.resume_delay_s)
        engine.resume()
        return json_response({"status": "resumed"})

    @app.get("/is_paused")
    async def is_paused(request: Request) -> Response:
        return json_response({"is_paused": engine_of(request).paused})

    @app.post("/abort_requests")
    async def abort_requests(request: Request) -> Response:
        raw = await request.body()
        body = await read_body(request) if raw.strip() else {}
        ids = body.get("request_ids") if isinstance(body, dict) else None
        aborted = engine_of(request).abort([str(i) for i in ids] if ids else None)
        return json_response({"status": "aborted", "aborted": aborted})

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request) -> Response:
        engine = engine_of(request)
        req = parse_body(WeightVersionRequest, await read_body(request), engine.config.version)
        engine.set_weight_version(req.new_version)
        return json_response({"success": True, "new_version": req.new_version})

    @app.post("/finish_weight_update")
    async def finish_weight_update(request: Request) -> Response:
        raw = await request.body()
        body = await read_body(request) if raw.strip() else {}
        if isinstance(body, dict) and body.get("weight_version") is not None:
            engine_of(request).set_weight_version(str(body["weight_version"]))
        return json_response({"message": "Weight update finished"})

    @app.get("/weight_info")
    async def weight_info(request: Request) -> Response:
        return json_response({"weight_version": engine_of(request).weight_version})
