"""A bounded image cache: older copies of an image are deleted, never one in use.

Copies of one image share its *lineage*: template, format and parameters. Each new cache key
(agentroll's source or version, the base image, a lock file: ``lock``-mode builds count with
the ``versioned`` ones of their template) publishes a new copy. ``prune`` keeps the newest
``keep`` of each lineage, ranked by last use (the later of the build and the last sandbox
start from it), and deletes the others with their side files, except a copy that

- a sandbox runs from: its use lock (imageuse.py) cannot be taken exclusively;
- a build holds: its build lock is taken (a build of that very key, or a reuse check);
- has anything mounted below it.

Those are skipped and reported, never waited for. Task images built from Dockerfiles have
no template (each task is its own image) and are never pruned here. ``keep`` 0 prunes nothing.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentroll.runtime.images.cache import ImageSlot, remove_tree, tree_size
from agentroll.runtime.images.errors import ImageError
from agentroll.runtime.images.proc import mounts_under
from agentroll.runtime.imageuse import open_lock, still_named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedImage:
    slot: ImageSlot
    template: str
    lineage: str  # template, format and parameters, as one comparable string
    last_used: float


@dataclass
class PruneReport:
    removed: list[tuple[str, int]] = field(default_factory=list)  # image name, bytes freed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # image name, why

    @property
    def freed_bytes(self) -> int:
        return sum(size for _, size in self.removed)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _read(metadata: Path, images_dir: Path) -> CachedImage | None:
    """The complete template image ``metadata`` describes, or None (task image, unreadable)."""
    try:
        meta = json.loads(metadata.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    template, fmt, name = meta.get("template"), meta.get("format"), meta.get("name")
    if not (isinstance(template, str) and isinstance(fmt, str) and name == metadata.stem):
        return None
    slot = ImageSlot(images_dir, name, fmt)
    if not slot.image.exists():
        return None
    lineage = json.dumps([template, fmt, meta.get("params")], sort_keys=True)
    built = meta.get("built_at")
    last_used = max(float(built) if isinstance(built, int | float) else 0.0, _mtime(slot.use_lock))
    return CachedImage(slot, template, lineage, last_used)


def cached_images(images_dir: Path) -> list[CachedImage]:
    """Every complete image built from a template in ``images_dir``."""
    found = (_read(path, images_dir) for path in sorted(images_dir.glob("*.json")))
    return [image for image in found if image is not None]


@contextmanager
def _exclusive(path: Path) -> Iterator[bool]:
    """Whether ``path``'s flock was free and is now ours (held until the block ends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield still_named(fd, path)  # else another pruner removed it meanwhile
    finally:
        os.close(fd)


def _delete(slot: ImageSlot) -> int:
    """Remove one image and its side files; the bytes it held. Call with both locks held."""
    mounted = mounts_under(slot.image)
    if mounted:
        raise ImageError(f"still mounted there: {mounted}")
    size = tree_size(slot.image)
    # Metadata first: from here on the image is not complete, so nobody reuses a half-deleted one.
    slot.metadata.unlink(missing_ok=True)
    remove_tree(slot.image)
    for side in (slot.recipe, slot.log, slot.use_lock, slot.lock):
        side.unlink(missing_ok=True)
    return size


def _evict(image: CachedImage, report: PruneReport) -> None:
    slot = image.slot
    try:
        with ExitStack() as locks:
            if not locks.enter_context(_exclusive(slot.lock)):
                report.skipped.append((slot.name, "a build holds it"))
                return
            if not locks.enter_context(_exclusive(slot.use_lock)):
                report.skipped.append((slot.name, "in use by a sandbox"))
                return
            report.removed.append((slot.name, _delete(slot)))
    except (OSError, ImageError) as exc:
        log.warning("image cache: could not evict %s: %s", slot.name, exc)
        report.skipped.append((slot.name, f"not deleted: {exc}"))


def prune(
    images_dir: Path, keep: int, *, spare: str | None = None, template: str | None = None
) -> PruneReport:
    """Delete all but the newest ``keep`` copies of each lineage (see the module docstring).

    ``spare`` (the image a build just published or reused) counts as the newest of its
    lineage whatever the clocks say; ``template`` limits the pruning to that template.
    """
    report = PruneReport()
    if keep <= 0:
        return report
    lineages: dict[str, list[CachedImage]] = defaultdict(list)
    for image in cached_images(images_dir):
        if template is None or image.template == template:
            lineages[image.lineage].append(image)
    for copies in lineages.values():
        copies.sort(key=lambda c: (c.slot.name == spare, c.last_used, c.slot.name), reverse=True)
        for image in copies[keep:]:
            _evict(image, report)
    return report


def prune_after_build(images_dir: Path, keep: int, *, built: str, template: str) -> PruneReport:
    """``prune`` ``template``'s copies after ``built`` was published; logs, never raises."""
    try:
        report = prune(images_dir, keep, spare=built, template=template)
    except Exception:  # the build succeeded: a failed clean-up must not turn it into a failure
        log.exception("image cache: eviction after building %s failed", built)
        return PruneReport()
    for name, size in report.removed:
        log.info("image cache: evicted %s (%d bytes), older than the newest %d", name, size, keep)
    for name, why in report.skipped:
        log.info("image cache: kept %s beyond the newest %d: %s", name, keep, why)
    return report
