"""Wheels for the Python environment inside an image, fetched on the host.

Why on the host: the host's pip already knows how to reach packages here (its index
mirrors, proxy and CA certificates, find-links folders), while a fresh image knows none of
that, and HPC build nodes are often offline. We fetch binary wheels for the *image's*
interpreter and platform (explicit ``--python-version``/``--platform``), then the image
installs them with ``--no-index``. agentroll itself is built as a wheel from the source tree.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from agentroll.runtime.images.errors import BuildFailed
from agentroll.runtime.images.proc import run_logged


async def build_agentroll_wheel(
    source_root: Path, dest: Path, *, log_path: Path, timeout_s: float
) -> Path:
    await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest)]
    await run_logged(
        [*argv, str(source_root)],
        log_path=log_path,
        timeout_s=timeout_s,
        what="pip wheel (agentroll)",
    )
    wheels = await asyncio.to_thread(lambda: sorted(dest.glob("agentroll-*.whl")))
    if not wheels:
        raise BuildFailed("pip wheel produced no agentroll wheel", log_path=log_path)
    return wheels[-1]


def download_argv(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str,
    platforms: Sequence[str],
    constraints: Path | None = None,
) -> list[str]:
    abi = "cp" + python_version.replace(".", "")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "-d",
        str(dest),
        "--find-links",
        str(dest),
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--abi",
        abi,
    ]
    for tag in platforms:
        argv += ["--platform", tag]
    if constraints is not None:
        argv += ["-c", str(constraints)]
    return [*argv, *requirements]


async def download_wheels(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str,
    platforms: Sequence[str],
    constraints: Path | None,
    log_path: Path,
    timeout_s: float,
) -> None:
    await asyncio.to_thread(dest.mkdir, parents=True, exist_ok=True)
    argv = download_argv(
        requirements,
        dest,
        python_version=python_version,
        platforms=platforms,
        constraints=constraints,
    )
    await run_logged(argv, log_path=log_path, timeout_s=timeout_s, what="pip download")
