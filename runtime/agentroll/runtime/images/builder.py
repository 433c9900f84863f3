"""``build_image``: render a template, derive the cache key, reuse or build, publish.

Concurrent builds of one image serialise on the image's file lock: the first builds and
publishes, the others then find the finished image and reuse it (``scratch`` rebuilds,
one after the other). Every build runs in a private folder and is published by rename.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentroll.runtime.images import templates
from agentroll.runtime.images.base import BuildJob, ImageBackend
from agentroll.runtime.images.cache import (
    CacheMode,
    ImageSlot,
    cache_key,
    held,
    image_name,
    publish,
    remove_workdir,
)
from agentroll.runtime.images.context import (
    agentroll_version,
    default_source_root,
    source_digest,
    template_context,
)
from agentroll.runtime.images.errors import TemplateError
from agentroll.runtime.images.evict import prune_after_build
from agentroll.runtime.images.templates import ImageFormat
from agentroll.runtime.settings import cache_settings

DEFAULT_TIMEOUT_S = 1800.0
CACHE_MODES = ("scratch", "versioned", "lock")


@dataclass(frozen=True)
class BuiltImage:
    name: str
    path: Path  # the rootfs folder or the .sif file
    reused: bool
    recipe_path: Path
    build_log: Path | None  # None when reused and no log was kept
    metadata_path: Path
    key: str
    evicted: tuple[tuple[str, int], ...] = ()  # older copies this build removed: name, bytes


def default_backend(fmt: str) -> ImageBackend:
    if fmt == "rootfs":
        from agentroll.runtime.images.rootfs import MmdebstrapBuilder

        return MmdebstrapBuilder()
    if fmt == "singularity":
        from agentroll.runtime.images.singularity import ApptainerBuilder

        return ApptainerBuilder()
    raise TemplateError(f"unknown image format {fmt!r}; known: {sorted(templates.TEMPLATE_FILES)}")


def render_template(
    template: str,
    fmt: ImageFormat,
    params: Mapping[str, str] | None = None,
    *,
    templates_dir: Path | None = None,
    use_lock: bool = False,
) -> str:
    """The recipe text ``template`` renders to for ``fmt`` with ``params``."""
    tpl = templates.find_template(template, templates_dir)
    return templates.render(tpl, fmt, params or {}, template_context(use_lock=use_lock))


def list_templates(templates_dir: Path | None = None) -> list[str]:
    return templates.list_templates(templates_dir)


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _key(
    backend: ImageBackend,
    fmt: str,
    recipe: str,
    lock_text: str | None,
    source_root: Path | None,
) -> tuple[str, dict[str, str]]:
    """The cache key and a readable summary of its inputs (long texts as hashes)."""
    if lock_text is not None:
        inputs = {"recipe": recipe, "lock": lock_text}
        summary = {"recipe": _sha(recipe), "lock": _sha(lock_text)}
    else:
        inputs = {
            "recipe": recipe,
            "base_image": backend.base_image(recipe),
            "agentroll_version": agentroll_version(),
        }
        if source_root is not None:
            # Built from a source tree: the code changes without the version doing so.
            inputs["agentroll_source"] = source_digest(source_root)
        summary = inputs | {"recipe": _sha(recipe)}
    return cache_key(fmt, inputs), summary


@dataclass(frozen=True)
class _Plan:
    template: templates.Template
    recipe: str
    key: str
    key_inputs: dict[str, str]
    slot: ImageSlot


def _plan(
    template: str,
    fmt: ImageFormat,
    params: Mapping[str, str],
    images_dir: Path,
    lock_file: Path | None,
    templates_dir: Path | None,
    backend: ImageBackend,
    source_root: Path | None,
) -> _Plan:
    """Render, derive the key and the slot (small file reads: run off the event loop)."""
    tpl = templates.find_template(template, templates_dir)
    lock_text = lock_file.read_text() if lock_file is not None else None
    context = template_context(use_lock=lock_text is not None)
    recipe = templates.render(tpl, fmt, params, context)
    key, inputs = _key(backend, fmt, recipe, lock_text, source_root)
    return _Plan(
        tpl, recipe, key, inputs, ImageSlot(images_dir.resolve(), image_name(tpl.name, key), fmt)
    )


def _start(plan: _Plan, job: BuildJob) -> None:
    job.recipe_path.write_text(plan.recipe)
    plan.slot.log.write_text("")  # ours alone while the lock is held; kept after failures


def _finish(plan: _Plan, job: BuildJob, meta: Mapping[str, object]) -> None:
    shutil.copyfile(job.recipe_path, plan.slot.recipe)
    publish(plan.slot, job.output, meta)


async def build_image(
    template: str,
    *,
    fmt: ImageFormat,
    cache: CacheMode,
    params: Mapping[str, str] | None = None,
    images_dir: Path,
    lock_file: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    templates_dir: Path | None = None,
    source_root: Path | None = None,
    backend: ImageBackend | None = None,
    keep: int | None = None,
) -> BuiltImage:
    """Build (or reuse) the image ``template`` renders to; see the module docstring.

    ``timeout_s`` bounds the wait for a concurrent build of the same image and, separately,
    the build itself. ``source_root`` is the agentroll tree whose wheel goes into the image
    (default: the tree this package runs from). After a build publishes, older copies of the
    image beyond the newest ``keep`` are evicted (evict.py; default: the ``images_keep``
    setting; 0 keeps all).
    """
    if cache not in CACHE_MODES:
        raise TemplateError(f"unknown cache mode {cache!r}; known: {list(CACHE_MODES)}")
    if cache == "lock" and lock_file is None:
        raise TemplateError("cache mode 'lock' needs a dependency lock file")
    if cache == "versioned" and lock_file is not None:
        raise TemplateError(
            "a lock file applies to cache modes 'lock' and 'scratch', "
            "not 'versioned' (whose key ignores the lock)"
        )
    backend = backend or default_backend(fmt)
    keep = cache_settings().images_keep if keep is None else keep
    params = dict(params or {})
    source_root = source_root or default_source_root()
    plan = await asyncio.to_thread(
        _plan, template, fmt, params, images_dir, lock_file, templates_dir, backend, source_root
    )
    slot = plan.slot
    async with held(slot.lock, timeout_s=timeout_s, what=slot.name):
        done = await asyncio.to_thread(slot.complete, plan.key)
        if cache != "scratch" and done is not None:
            await asyncio.to_thread(slot.mark_used)
            log = slot.log if await asyncio.to_thread(slot.log.exists) else None
            return BuiltImage(
                slot.name, slot.image, True, slot.recipe, log, slot.metadata, plan.key
            )
        work = await asyncio.to_thread(slot.new_workdir)
        try:
            job = BuildJob(
                name=slot.name,
                recipe_path=work / slot.recipe.name,
                output=work / "image",
                context_dir=work / "context",
                log_path=slot.log,
                timeout_s=timeout_s,
                download_cache=slot.downloads,
                lock_file=lock_file,
                source_root=source_root,
            )
            await asyncio.to_thread(_start, plan, job)
            started = time.time()
            tools = await backend.build(job)
            meta = {
                "name": slot.name,
                "key": plan.key,
                "cache_mode": cache,
                "format": fmt,
                "template": plan.template.name,
                "template_dir": str(plan.template.directory),
                "params": plan.template.resolve_params(params),
                "key_inputs": plan.key_inputs,
                "agentroll_version": agentroll_version(),
                "tools": tools,
                "built_at": started,
                "build_seconds": round(time.time() - started, 1),
            }
            await asyncio.to_thread(_finish, plan, job, meta)
        finally:
            # shield: a cancelled build still removes its private folder
            await asyncio.shield(asyncio.to_thread(remove_workdir, work))
    # Outside the lock: waiters for this image need not wait for the older copies' deletion.
    evicted = await asyncio.to_thread(
        prune_after_build, slot.images_dir, keep, built=slot.name, template=plan.template.name
    )
    return BuiltImage(
        slot.name,
        slot.image,
        False,
        slot.recipe,
        slot.log,
        slot.metadata,
        plan.key,
        tuple(evicted.removed),
    )
