"""A bounded image cache: older copies of an image are deleted, never one in use.

Copies of one image share its *lineage*: template, format and parameters. Each new cache key
(agentroll's source or version, the base image, a lock file: ``lock``-mode builds count with
the ``versioned`` ones of their template) publishes a new copy. ``prune`` keeps the newest
``keep`` of each lineage, ranked by last use (the later of the build and the last sandbox
start from it), and deletes the others with their side files, except a copy that

- a sandbox runs from: its use lock (imageuse.py) cannot be taken exclusively;
- a build holds: its build lock is taken (a build of that very key, or a reuse check);
- has anything mounted below it.

Those are skipped and reported, never waited for, as is a copy used or rebuilt after the
ranking (it is read again once its locks are held), and one whose name is not a plain folder
name (a cache entry never names anything but its own copy). Task images built from Dockerfiles have
no template (each task is its own image) and are never pruned here. ``keep`` 0 prunes nothing.
``prune_entries`` is the rule itself, over any cache of copies (the verifiers environments').
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentroll.runtime.images.cache import ImageSlot, remove_tree, tree_size
from agentroll.runtime.images.errors import ImageError
from agentroll.runtime.images.proc import mounts_under
from agentroll.runtime.imageuse import open_lock, still_named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheEntry:
    """One copy in a cache, as eviction sees it (image copies here; verifiers venvs too)."""

    name: str
    family: str  # what an operator names to prune (the template)
    lineage: str  # copies of one lineage replace each other
    last_used: float
    build_lock: Path  # held while the copy is built or checked
    use_lock: Path  # held shared by whatever runs from the copy
    delete: Callable[[], int]  # removes the copy and its side files; the bytes freed
    reread: Callable[[], CacheEntry | None]  # the entry as the cache holds it now


# A copy is one folder (or file) directly in its cache, named by its builder.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass
class PruneReport:
    removed: list[tuple[str, int]] = field(default_factory=list)  # copy name, bytes freed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # copy name, why

    @property
    def freed_bytes(self) -> int:
        return sum(size for _, size in self.removed)


def last_use(use_lock: Path, since: float) -> float:
    """The later of ``since`` (the build) and the last stamp on the use lock."""
    try:
        return max(since, use_lock.stat().st_mtime)
    except OSError:
        return since


@contextmanager
def _exclusive(path: Path) -> Iterator[bool]:
    """Whether ``path``'s flock was free and is now ours (held until the block ends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        with contextlib.suppress(OSError):  # made here, not by a use: not a newer rank
            os.utime(fd, (0, 0))
    except FileExistsError:
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


def _evict(entry: CacheEntry, report: PruneReport, in_use: str) -> None:
    if not PLAIN_NAME.fullmatch(entry.name):
        report.skipped.append((entry.name, "not a plain copy name"))
        return
    try:
        with ExitStack() as locks:
            if not locks.enter_context(_exclusive(entry.build_lock)):
                report.skipped.append((entry.name, "a build holds it"))
                return
            if not locks.enter_context(_exclusive(entry.use_lock)):
                report.skipped.append((entry.name, in_use))
                return
            # Ranked before the locks were ours: a copy rebuilt or started from since is newer.
            now = entry.reread()
            if now is None or now.last_used != entry.last_used:
                report.skipped.append((entry.name, "used or rebuilt since the ranking"))
                return
            report.removed.append((entry.name, entry.delete()))
    except (OSError, ImageError) as exc:
        log.warning("cache: could not evict %s: %s", entry.name, exc)
        report.skipped.append((entry.name, f"not deleted: {exc}"))


def prune_entries(
    entries: Iterable[CacheEntry],
    keep: int,
    *,
    spare: str | None = None,
    in_use: str = "in use by a sandbox",
) -> PruneReport:
    """Delete all but the newest ``keep`` copies of each lineage (see the module docstring).

    ``spare`` (the copy a build just published) counts as the newest of its lineage whatever
    the clocks say; ``in_use`` says in the report what holds a copy's use lock.
    """
    report = PruneReport()
    if keep <= 0:
        return report
    lineages: dict[str, list[CacheEntry]] = defaultdict(list)
    for entry in entries:
        lineages[entry.lineage].append(entry)
    for copies in lineages.values():
        copies.sort(key=lambda c: (c.name == spare, c.last_used, c.name), reverse=True)
        for entry in copies[keep:]:
            _evict(entry, report, in_use)
    return report


def _delete_image(slot: ImageSlot) -> int:
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


def _read(metadata: Path, images_dir: Path) -> CacheEntry | None:
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
    built = meta.get("built_at")
    return CacheEntry(
        name=name,
        family=template,
        lineage=json.dumps([template, fmt, meta.get("params")], sort_keys=True),
        last_used=last_use(slot.use_lock, float(built) if isinstance(built, int | float) else 0),
        build_lock=slot.lock,
        use_lock=slot.use_lock,
        delete=functools.partial(_delete_image, slot),
        reread=functools.partial(_read, metadata, images_dir),
    )


def cached_images(images_dir: Path) -> list[CacheEntry]:
    """Every complete image built from a template in ``images_dir``."""
    found = (_read(path, images_dir) for path in sorted(images_dir.glob("*.json")))
    return [image for image in found if image is not None]


def prune(
    images_dir: Path, keep: int, *, spare: str | None = None, template: str | None = None
) -> PruneReport:
    """``prune_entries`` over the images of ``images_dir`` (of ``template`` only, if given)."""
    images = cached_images(images_dir)
    return prune_entries(
        (i for i in images if template is None or i.family == template), keep, spare=spare
    )


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
