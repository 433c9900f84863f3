"""The server's one settings object.

Sources, highest priority first: explicit values (CLI flags), environment variables
(`AGENTROLL_<FIELD>`, nested with `__`, e.g. `AGENTROLL_POOLS__RUN=512`), a TOML file
(`--config` or `AGENTROLL_CONFIG`), then the defaults documented on each field.
"""

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from agentroll.runtime.config import BwrapConfig, RuntimeConfig
from agentroll.server.admission import AdmissionSettings
from agentroll.server.errors import UnsafeSettingsError
from agentroll.server.logs import LogFormat
from agentroll.server.proxy import ProxyCaps
from agentroll.server.schema import PoolSizes
from agentroll.server.schema.auth import DEFAULT_DB_PATH, is_loopback

_CONFIG_FILE: ContextVar[Path | None] = ContextVar("agentroll_config_file", default=None)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AGENTROLL_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    host: str = Field("127.0.0.1", description="Listen address. Beyond loopback needs api_token.")
    port: int = Field(8700, ge=0, le=65535, description="Listen port (0 picks a free one).")
    api_token: SecretStr | None = Field(
        None,
        description="Bearer token clients must present. Unset: the server generates one and "
        "keeps it in `token_file` (the API is never open).",
    )
    token_file: Path | None = Field(
        None,
        description="Where the generated token is kept (mode 0600, reused across restarts) "
        "when api_token is unset; default `api-token` beside db_path.",
    )
    admin_token: SecretStr | None = Field(
        None,
        description="If set, the only token accepted for the admin routes (pause/resume, "
        "backends add/drain/remove, pools, shutdown, cancel all); it works on every route.",
    )
    metrics_public: bool = Field(
        False,
        description="Serve /metrics without a token (for a scraper that carries none); the "
        "metrics hold no task data either way.",
    )
    max_requests_per_client: int = Field(
        512, ge=1, description="Concurrent requests per client address; beyond: 429."
    )
    db_path: Path = Field(DEFAULT_DB_PATH, description="SQLite job and result store.")
    db_synchronous: Literal["NORMAL", "FULL"] = Field(
        "NORMAL",
        description="NORMAL survives a server crash; FULL also survives power loss (slower).",
    )
    pools: PoolSizes = Field(
        default_factory=PoolSizes,
        description="Workers per stage and the ready buffer (resizable at run time: "
        "`PATCH /v1/admin/pools`).",
    )
    admission: AdmissionSettings = Field(
        default_factory=AdmissionSettings,
        description="When INIT waits for the node to have room (memory, threads, CPU).",
    )
    on_restart: Literal["requeue", "infra_error"] = Field(
        "requeue", description="What happens to jobs that were in flight when the server died."
    )
    max_requeues: int = Field(
        3,
        ge=0,
        description="How often one job may be requeued by restarts; beyond it the job ends "
        "`infra_error` with cause `requeue_limit` (a job that kills its server is not replayed "
        "forever).",
    )
    max_live_jobs: int = Field(
        200_000,
        ge=1,
        description="Unfinished jobs admitted at once; beyond it submissions get 429.",
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Largest request body.")
    shutdown_grace_s: float = Field(30.0, ge=0, description="Drain time on shutdown.")
    llm_request_timeout_s: float = Field(600.0, gt=0, description="One generation call.")
    max_policy_lag: int | None = Field(
        None, ge=0, description="Jobs whose policy_version lags more than this are not started."
    )
    cancel_stale_running: bool = Field(
        False, description="On resume, also cancel running jobs that now lag beyond the bound."
    )
    health_interval_s: float = Field(5.0, gt=0, description="Backend health-check period.")
    measure_template_divergence: bool = Field(
        True,
        description="After RUN of a multi-turn rollout, count where a canonical re-render of "
        "the chat would differ from the recorded tokens (metadata.template_divergence).",
    )
    backend_wait_s: float = Field(
        60.0, ge=0, description="How long a rollout waits for a backend to be registered."
    )
    llm_proxy: ProxyCaps = Field(
        default_factory=ProxyCaps,
        description="What each rollout's LLM proxy accepts from its harness (rate, body size, "
        "connections).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="The server's log level."
    )
    log_format: LogFormat = Field(
        "text", description="Log lines as text or JSON; both carry job id, stage and backend."
    )
    sandbox: RuntimeConfig = Field(
        default_factory=BwrapConfig,
        description="Sandbox runtime: bwrap (default), singularity, or local (no isolation).",
    )

    @field_validator("api_token", "admin_token", mode="before")
    @classmethod
    def _blank_token_is_unset(cls, value: Any) -> Any:
        """`AGENTROLL_API_TOKEN=` (a launcher passing on an unset variable) configures no
        token: it must not become a token that an empty `Bearer ` matches."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @model_validator(mode="after")
    def _refuse_exposed_without_token(self) -> "Settings":
        if not is_loopback(self.host) and self.api_token is None:
            raise UnsafeSettingsError(
                f"refusing to listen on {self.host!r} without an api_token: set "
                "AGENTROLL_API_TOKEN (or api_token in the config file), or bind to 127.0.0.1"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _CONFIG_FILE.get() or os.environ.get("AGENTROLL_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(toml_file)))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from a TOML file (optional), the environment, and explicit overrides."""
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file not found: {config_file}")
    token = _CONFIG_FILE.set(config_file)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    finally:
        _CONFIG_FILE.reset(token)
