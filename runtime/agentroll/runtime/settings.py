"""The folders every agentroll command shares, read from one settings object.

`agentroll serve` (its handlers build and look up images there), `agentroll build-image`,
`agentroll harbor-image` and `agentroll engine setup` all call `cache_settings()`, so a
folder set once in the environment is the folder every command uses: a base image built
with `agentroll build-image --tag ...` lands where the server looks for it.

Each field is read from `AGENTROLL_<FIELD>` (e.g. `AGENTROLL_IMAGES_DIR`); an empty variable
counts as unset. These are process settings, not server settings: a command that never
starts the server (`build-image`) has no server config file to read.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "AGENTROLL_"


class CacheSettings(BaseSettings):
    """Where agentroll keeps what it builds or downloads once and reuses."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True
    )

    images_dir: Path = Field(
        Path("~/.cache/agentroll/images"),
        description="Image cache: built root filesystems and .sif images, the OCI store that "
        "task Dockerfiles build FROM, and unpacked Harbor task uploads. `build-image`, "
        "`harbor-image` and the server must agree on it.",
    )
    images_keep: int = Field(
        2,
        ge=0,
        description="Copies of one image (same template, format and parameters; `lock` and "
        "`versioned` builds alike) the image cache keeps: after a build publishes a new copy, "
        "older ones beyond the newest `images_keep` (by last use) are deleted, except any a "
        "running sandbox uses. 0 keeps every copy (no eviction). `agentroll build-image "
        "--prune` applies it at once.",
    )
    verifiers_keep: int = Field(
        2,
        ge=0,
        description="Copies of one verifiers environment (same package list and interpreter; "
        "each verifiers lock or edited local package installs a new one) the environments "
        "cache keeps, by last use; older ones are deleted after an install, except any a live "
        "server set up. 0 keeps every copy.",
    )
    swe_mirrors: Path = Field(
        Path("~/.cache/agentroll/swe-mirrors"),
        description="Bare git mirrors of SWE task repositories (the history a task's image "
        "may not carry); cached, never evicted.",
    )
    engine_cache: Path = Field(
        Path("/var/tmp/agentroll-engine"),
        description="vLLM's CPU environment and the tiny test models (`agentroll engine "
        "setup`, the engine tests, `agentroll demo --engine vllm-cpu`).",
    )

    @field_validator("images_dir", "swe_mirrors", "engine_cache")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable that sets `field`."""
        if field not in cls.model_fields:
            raise KeyError(f"no setting {field!r}; known: {sorted(cls.model_fields)}")
        return f"{ENV_PREFIX}{field.upper()}"


def cache_settings() -> CacheSettings:
    """The settings as the environment gives them now (read on each call: cheap, and a
    test or launcher that sets a variable is seen at once)."""
    return CacheSettings()
