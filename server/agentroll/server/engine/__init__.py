"""vLLM's CPU build as a local engine: its environment (created by code, cached), and a
vLLM OpenAI server process the caller owns. docs/engine.md."""

from agentroll.server.engine.environment import (
    CACHE_ENV,
    EngineEnvironment,
    EngineSetupError,
    cache_root,
    ensure_environment,
)
from agentroll.server.engine.vllm_server import TOKENIZER_DIR, EngineStartError, VLLMServer

__all__ = [
    "CACHE_ENV",
    "TOKENIZER_DIR",
    "EngineEnvironment",
    "EngineSetupError",
    "EngineStartError",
    "VLLMServer",
    "cache_root",
    "ensure_environment",
]
