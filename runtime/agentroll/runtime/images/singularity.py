"""Singularity/Apptainer images (.sif) built from a rendered definition file.

The definition is parsed with spython before building (a malformed file fails here, with
our error, instead of minutes into a build) and to read its ``From:`` for the cache key.
``apptainer build`` runs with the build context as its working directory, so the
definition's ``%files`` can name ``wheels/...`` and ``lock.txt`` by relative path and the
rendered text, hence the image name, does not depend on where the build happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime.images.base import BuildJob
from agentroll.runtime.images.errors import BuilderUnavailable, TemplateError
from agentroll.runtime.images.proc import capture, run_logged
from agentroll.runtime.images.wheelhouse import build_agentroll_wheel

EXECUTABLES = ("apptainer", "singularity")
_BOOTSTRAP = re.compile(r"^\s*Bootstrap:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Definition:
    """What the builder needs from a definition file (section bodies as lines)."""

    bootstrap: str
    base: str  # the From: header
    files: list[str]
    post: list[str]
    environment: list[str]
    labels: list[str]

    @property
    def file_sources(self) -> list[str]:
        return [line.split()[0] for line in self.files if line.strip()]


def parse_definition(text: str) -> Definition:
    """Header and sections of a definition file, via spython's Singularity parser."""
    from spython.main.parse.parsers import SingularityParser

    bootstrap = _BOOTSTRAP.search(text)
    if bootstrap is None:
        raise TemplateError("definition file has no 'Bootstrap:' header")
    with tempfile.NamedTemporaryFile("w", suffix=".def") as tmp:
        tmp.write(text)
        tmp.flush()
        with contextlib.redirect_stdout(io.StringIO()):  # spython prints progress
            recipes = SingularityParser(tmp.name).recipe
    recipe = next(iter(recipes.values()))
    if not recipe.fromHeader:
        raise TemplateError("definition file has no 'From:' header")
    return Definition(
        bootstrap=bootstrap.group(1),
        base=recipe.fromHeader,
        files=list(recipe.files),
        post=list(recipe.install),
        environment=list(recipe.environ),
        labels=list(recipe.labels),
    )


def find_executable() -> str:
    for name in EXECUTABLES:
        path = shutil.which(name)
        if path:
            return path
    raise BuilderUnavailable("neither apptainer nor singularity is on PATH")


class ApptainerBuilder:
    fmt = "singularity"

    def __init__(self, *, executable: str | None = None, fakeroot: bool | None = None) -> None:
        self.executable = executable
        # Unprivileged builds need --fakeroot (user namespaces); root builds must not use it.
        self.fakeroot = (os.geteuid() != 0) if fakeroot is None else fakeroot

    def base_image(self, recipe_text: str) -> str:
        definition = parse_definition(recipe_text)
        return f"{definition.bootstrap}:{definition.base}"

    def command(self, executable: str, job: BuildJob) -> list[str]:
        argv = [executable, "build", "--force"]  # --force: no prompt, output is ours alone
        if self.fakeroot:
            argv.append("--fakeroot")
        return [*argv, str(job.output), str(job.recipe_path)]

    async def build(self, job: BuildJob) -> dict[str, str]:
        exe = self.executable or find_executable()
        text = await asyncio.to_thread(job.recipe_path.read_text)
        definition = await asyncio.to_thread(parse_definition, text)
        await asyncio.to_thread(job.context_dir.mkdir, parents=True, exist_ok=True)
        if any(src.startswith("wheels") for src in definition.file_sources):
            if job.source_root is None:
                raise TemplateError(
                    "the definition copies wheels/ but no agentroll source tree "
                    "was found to build the agentroll wheel"
                )
            await build_agentroll_wheel(
                job.source_root,
                job.context_dir / "wheels",
                log_path=job.log_path,
                timeout_s=job.timeout_s,
            )
        if job.lock_file is not None:
            await asyncio.to_thread(shutil.copyfile, job.lock_file, job.context_dir / "lock.txt")
        await run_logged(
            self.command(exe, job),
            log_path=job.log_path,
            cwd=job.context_dir,
            timeout_s=job.timeout_s,
            what=Path(exe).name + " build",
        )
        return {Path(exe).name: await capture([exe, "--version"]), "python": sys.version.split()[0]}
