"""The rootfs recipe: what ``rootfs.toml.j2`` templates render to, validated by pydantic.

A recipe names a Debian base (suite, variant, mirrors, packages), an optional Python virtual
environment holding agentroll and its ``sandbox`` extra, shell steps run inside the image,
and environment variables recorded in ``/etc/agentroll/image.json`` for the sandbox runtime.
"""

from __future__ import annotations

import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentroll.runtime.images.errors import TemplateError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DebianBase(_Model):
    suite: str = Field(min_length=1)
    variant: Literal["extract", "custom", "essential", "apt", "minbase", "buildd", "required"]
    mirrors: list[str] = Field(min_length=1)  # full "deb URL SUITE COMPONENTS" lines
    packages: list[str] = []
    glibc: str = Field(pattern=r"^2\.\d+$")  # the suite's glibc: bounds the wheels we fetch


class PythonEnv(_Model):
    venv: str = Field(pattern=r"^/")
    interpreter: str = "python3"  # inside the image
    version: str = Field(pattern=r"^3\.\d+$")  # must match the image's interpreter
    install_agentroll: bool = True
    extras: list[str] = ["sandbox"]
    requirements: list[str] = []  # more pip requirements beside agentroll

    @field_validator("extras")
    @classmethod
    def _known_chars(cls, extras: list[str]) -> list[str]:
        for extra in extras:
            if not extra.replace("-", "").replace("_", "").isalnum():
                raise ValueError(f"bad extra name {extra!r}")
        return extras


class RootfsRecipe(_Model):
    image: str = Field(min_length=1)  # a label, normally the template name
    debian: DebianBase
    python: PythonEnv | None = None
    run: list[str] = []  # shell scripts run inside the image, in order, after the installs
    env: dict[str, str] = {}

    @property
    def base_image(self) -> str:
        d = self.debian
        return f"debian:{d.suite}/{d.variant} " + " | ".join(d.mirrors)


def parse_rootfs_recipe(text: str) -> RootfsRecipe:
    try:
        return RootfsRecipe.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise TemplateError(f"rendered rootfs recipe is not valid TOML: {exc}") from exc
    except ValidationError as exc:
        raise TemplateError(f"rendered rootfs recipe is invalid: {exc}") from exc


def wheel_platforms(glibc: str, arch: str) -> list[str]:
    """Every manylinux tag a system with this glibc accepts (pip does not expand them)."""
    minor = int(glibc.split(".")[1])
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for floor, name in legacy.items() if minor >= floor]
    return tags
