"""Task images from Dockerfiles (Harbor / Terminal-Bench tasks), built rootless with buildah.

``build_task_image`` builds a task's Dockerfile against the images folder's OCI store (its
``FROM`` images are bases imported with ``agentroll build-image task-base --tag NAME``, or
pulled from a registry when ``pull``), then turns the result into the format the sandbox
runtime uses: a rootfs folder (``umoci unpack --rootless``) with ``/etc/agentroll/image.json``,
or a ``.sif`` (``apptainer build`` from the OCI layout). Results are cached by content
(see taskkey.py) under ``<name_prefix>-<12 hex>`` and published like ``build-image``'s: the
first of concurrent builds of one task builds, the others wait and reuse; a failed build
leaves only its log. The build's image is tagged under a unique temporary name, exported,
then removed from the store, so the store holds the bases only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentroll.runtime.imagemeta import IMAGE_META
from agentroll.runtime.images.cache import (
    ImageSlot,
    held,
    image_name,
    publish,
    remove_workdir,
    tree_size,
)
from agentroll.runtime.images.context import agentroll_version
from agentroll.runtime.images.errors import BaseImageMissing, BuildFailed, ImageError, TemplateError
from agentroll.runtime.images.ocistore import OciStore, normalise_image_name
from agentroll.runtime.images.proc import run_logged
from agentroll.runtime.images.taskkey import base_images, context_digest, task_key

VENV = "/opt/agentroll"
LAYOUT_TAG = "latest"
NO_VENV = (
    f"the image has no {VENV}/bin/python, which runs agentroll's action server in the "
    "sandbox: build the Dockerfile FROM a base made by "
    "`agentroll build-image task-base --tag <its FROM name>`"
)


@dataclass(frozen=True)
class TaskImage:
    name: str
    path: Path  # the rootfs folder or the .sif file
    reused: bool
    workdir: str | None  # the image's WORKDIR; None when unset or "/"
    env: dict[str, str]  # the image's ENV (PATH included)
    build_log: Path
    build_seconds: float
    size_bytes: int


def bud_argv(
    store: OciStore, *, dockerfile: Path, context_dir: Path, tag: str, pull: bool
) -> list[str]:
    """``buildah bud`` rootless: chroot isolation, no layer cache, failed containers removed."""
    return store.buildah(
        "bud",
        "--isolation=chroot",
        f"--pull={'missing' if pull else 'never'}",
        "--layers=false",
        "--force-rm",
        "-t",
        tag,
        "-f",
        str(dockerfile),
        str(context_dir),
    )


def push_argv(store: OciStore, tag: str, layout: Path) -> list[str]:
    return store.buildah("push", "-q", tag, f"oci:{layout}:{LAYOUT_TAG}")


def unpack_argv(layout: Path, bundle: Path) -> list[str]:
    return ["umoci", "unpack", "--rootless", "--image", f"{layout}:{LAYOUT_TAG}", str(bundle)]


def sif_argv(executable: str, layout: Path, sif: Path) -> list[str]:
    return [executable, "build", str(sif), f"oci:{layout}:{LAYOUT_TAG}"]


def sif_check_argv(executable: str, sif: Path) -> list[str]:
    return [executable, "exec", "--containall", str(sif), "test", "-x", f"{VENV}/bin/python"]


def oci_config(layout: Path) -> tuple[dict[str, str], str | None]:
    """The ENV and WORKDIR of the single image in an OCI layout."""

    def blob(digest: str) -> dict[str, object]:
        algo, _, hexdigest = digest.partition(":")
        return dict(json.loads((layout / "blobs" / algo / hexdigest).read_text()))

    index = json.loads((layout / "index.json").read_text())
    manifest = blob(index["manifests"][0]["digest"])
    config = blob(manifest["config"]["digest"]).get("config") or {}  # type: ignore[index]
    if not isinstance(config, dict):
        raise ImageError(f"the image exported to {layout} has a malformed config")
    env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
    workdir = config.get("WorkingDir") or None
    return env, (None if workdir in (None, "/") else str(workdir))


def _finish_rootfs(
    bundle: Path, output: Path, name: str, env: dict[str, str], workdir: str | None
) -> None:
    rootfs = bundle / "rootfs"
    if not os.path.lexists(rootfs / VENV.lstrip("/") / "bin/python"):
        raise ImageError(NO_VENV)
    meta_path = rootfs / IMAGE_META
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    record = {"image": name, "venv": VENV, "env": env, "workdir": workdir}
    meta_path.write_text(json.dumps(record, indent=2) + "\n")
    os.rename(rootfs, output)


@dataclass(frozen=True)
class _Request:
    context_dir: Path
    dockerfile: bytes
    bases: dict[str, str | None]  # normalised FROM name -> store id (None: not there)
    fmt: str
    pull: bool


def _dockerfile_bytes(
    context_dir: Path, dockerfile: Path | None, docker_image: str | None, fmt: str
) -> bytes:
    """The Dockerfile to build, checked with its inputs (small file reads: off the loop)."""
    if dockerfile is not None and docker_image is not None:
        raise TemplateError("give a Dockerfile or a prebuilt docker_image, not both")
    if fmt not in ("rootfs", "singularity"):
        raise TemplateError(f"unknown image format {fmt!r}; known: ['rootfs', 'singularity']")
    if not context_dir.is_dir():
        raise TemplateError(f"build context {context_dir} is not a folder")
    if docker_image is not None:
        return f"FROM {normalise_image_name(docker_image)}\n".encode()
    path = dockerfile if dockerfile is not None else context_dir / "Dockerfile"
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TemplateError(f"cannot read the Dockerfile {path}: {exc}") from exc


async def _base_ids(store: OciStore, dockerfile: bytes, pull: bool) -> dict[str, str | None]:
    """The store id of each image the Dockerfile builds FROM (missing: an error unless pull)."""
    names = [normalise_image_name(n) for n in base_images(dockerfile.decode(errors="replace"))]
    bases = {name: await store.image_id(name) for name in names}
    missing = [name for name, image_id in bases.items() if image_id is None]
    if missing and not pull:
        raise BaseImageMissing(
            f"base image {missing[0]} is not in the local image store {store.root} and pulling "
            f"is off: build it with `agentroll build-image task-base --tag {missing[0]} "
            f"--output-dir {store.images_dir}` (--param flavour=debian for a Debian base), "
            "or build with pull=True to fetch it from its registry"
        )
    return bases


def _reused(slot: ImageSlot, meta: dict[str, object]) -> TaskImage:
    env = meta.get("env")
    workdir = meta.get("workdir")
    return TaskImage(
        name=slot.name,
        path=slot.image,
        reused=True,
        workdir=str(workdir) if workdir else None,
        env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
        build_log=slot.log,
        build_seconds=float(meta.get("build_seconds") or 0.0),  # type: ignore[arg-type]
        size_bytes=int(meta.get("size_bytes") or 0),  # type: ignore[call-overload]
    )


async def _build(
    store: OciStore, req: _Request, slot: ImageSlot, work: Path, deadline: float
) -> tuple[Path, dict[str, str], str | None]:
    """Build in ``work``; return the finished image there, its ENV and WORKDIR."""
    loop = asyncio.get_running_loop()
    log = slot.log

    def left() -> float:
        return max(1.0, deadline - loop.time())

    dockerfile = work / "Dockerfile"
    layout = work / "oci"
    await asyncio.to_thread(dockerfile.write_bytes, req.dockerfile)
    tag = f"localhost/agentroll-build/{slot.name}-{uuid.uuid4().hex[:8]}"
    bud = bud_argv(
        store, dockerfile=dockerfile, context_dir=req.context_dir, tag=tag, pull=req.pull
    )
    await run_logged(bud, log_path=log, timeout_s=left(), what="buildah bud")
    try:
        await run_logged(
            push_argv(store, tag, layout), log_path=log, timeout_s=left(), what="buildah push"
        )
    finally:
        with contextlib.suppress(ImageError):  # a leftover tag costs disk, not correctness
            rmi = store.buildah("rmi", tag)
            await asyncio.shield(run_logged(rmi, log_path=log, timeout_s=60, what="buildah rmi"))
    env, workdir = await asyncio.to_thread(oci_config, layout)
    if req.fmt == "singularity":
        from agentroll.runtime.images.singularity import find_executable

        exe = find_executable()
        sif = work / "image.sif"
        await run_logged(
            sif_argv(exe, layout, sif), log_path=log, timeout_s=left(), what="apptainer build"
        )
        try:
            await run_logged(
                sif_check_argv(exe, sif), log_path=log, timeout_s=left(), what="apptainer exec"
            )
        except BuildFailed as exc:
            raise ImageError(f"{NO_VENV} (checked with `apptainer exec`; log: {log})") from exc
        return sif, env, workdir
    bundle = work / "bundle"
    await run_logged(
        unpack_argv(layout, bundle), log_path=log, timeout_s=left(), what="umoci unpack"
    )
    output = work / "image"
    await asyncio.to_thread(_finish_rootfs, bundle, output, slot.name, env, workdir)
    return output, env, workdir


async def build_task_image(
    context_dir: Path,
    *,
    dockerfile: Path | None = None,
    docker_image: str | None = None,
    images_dir: Path,
    fmt: Literal["rootfs", "singularity"] = "rootfs",
    pull: bool = False,
    timeout_s: float = 600.0,
    name_prefix: str = "task",
) -> TaskImage:
    """Build (or reuse) the image of a task's Dockerfile; see the module docstring.

    ``docker_image`` names a prebuilt image to use as is (a one-line ``FROM``). ``timeout_s``
    bounds the wait for a concurrent build of the same task and, separately, the build.
    """
    images_dir, context_dir = await asyncio.to_thread(
        lambda: (images_dir.resolve(), context_dir.resolve())
    )
    store = OciStore(images_dir)
    text = await asyncio.to_thread(_dockerfile_bytes, context_dir, dockerfile, docker_image, fmt)
    req = _Request(context_dir, text, await _base_ids(store, text, pull), fmt, pull)
    digest = await asyncio.to_thread(context_digest, context_dir)
    key, inputs = task_key(context=digest, dockerfile=text, base_ids=req.bases, fmt=fmt)
    slot = ImageSlot(images_dir, image_name(name_prefix, key), fmt)
    async with held(slot.lock, timeout_s=timeout_s, what=slot.name):
        done = await asyncio.to_thread(slot.complete, key)
        if done is not None:
            return _reused(slot, done)
        work = await asyncio.to_thread(slot.new_workdir)
        try:
            await asyncio.to_thread(slot.log.write_text, "")
            started = time.time()
            deadline = asyncio.get_running_loop().time() + timeout_s
            built, env, workdir = await _build(store, req, slot, work, deadline)
            size = await asyncio.to_thread(tree_size, built)
            seconds = round(time.time() - started, 1)
            meta = {
                "name": slot.name,
                "key": key,
                "format": fmt,
                "key_inputs": inputs,
                "from": req.bases,
                "agentroll_version": agentroll_version(),
                "env": env,
                "workdir": workdir,
                "size_bytes": size,
                "built_at": started,
                "build_seconds": seconds,
            }
            await asyncio.to_thread(publish, slot, built, meta)
        finally:
            await asyncio.shield(asyncio.to_thread(remove_workdir, work))
    return TaskImage(slot.name, slot.image, False, workdir, env, slot.log, seconds, size)
