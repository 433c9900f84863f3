"""The image cache: content-hash names, per-image file locks, atomic publication.

Layout of ``images_dir`` for an image named ``python-base-0123456789ab``::

    python-base-0123456789ab/            the rootfs (or python-base-0123456789ab.sif)
    python-base-0123456789ab.json        metadata; written last, so it marks a complete image
    python-base-0123456789ab.toml        the rendered recipe it was built from (.def: singularity)
    python-base-0123456789ab.build.log   the last build's log
    .locks/python-base-0123456789ab.lock flock held while building or checking
    .locks/python-base-0123456789ab.use  shared flock of each sandbox running from it
    .tmp/<name>.<random>/                private build folders (same file system: rename works)
    .downloads/npm/                      npm's download cache, shared by every build

Cache keys: ``versioned`` hashes the recipe rendered without a lock, the base image and the
agentroll version; ``lock`` hashes the recipe rendered with the lock and the lock's bytes;
``scratch`` uses the key the build would have and always rebuilds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentroll.runtime.images.errors import BuildTimeout, ImageError
from agentroll.runtime.images.proc import mounts_under
from agentroll.runtime.imageuse import LOCKS_DIR, still_named, use_file

CacheMode = Literal["scratch", "versioned", "lock"]
LOCK_POLL_S = 0.1


def cache_key(fmt: str, inputs: Mapping[str, str]) -> str:
    """sha256 over the format and the named key inputs (order-independent, unambiguous)."""
    payload = json.dumps({"format": fmt, **inputs}, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def image_name(template: str, key: str) -> str:
    return f"{template}-{key[:12]}"


@dataclass(frozen=True)
class ImageSlot:
    """Where one named image and its side files live in the cache."""

    images_dir: Path
    name: str
    fmt: str

    @property
    def image(self) -> Path:
        return self.images_dir / (self.name + (".sif" if self.fmt == "singularity" else ""))

    @property
    def metadata(self) -> Path:
        return self.images_dir / f"{self.name}.json"

    @property
    def recipe(self) -> Path:
        return self.images_dir / (self.name + (".def" if self.fmt == "singularity" else ".toml"))

    @property
    def log(self) -> Path:
        return self.images_dir / f"{self.name}.build.log"

    @property
    def downloads(self) -> Path:
        return self.images_dir / ".downloads"

    @property
    def lock(self) -> Path:
        return self.images_dir / LOCKS_DIR / f"{self.name}.lock"

    @property
    def use_lock(self) -> Path:
        return use_file(self.image)

    def mark_used(self) -> None:
        """Stamp the image's last use (a reuse counts): eviction keeps the recently used."""
        self.use_lock.touch()

    def new_workdir(self) -> Path:
        work = self.images_dir / ".tmp" / f"{self.name}.{uuid.uuid4().hex[:8]}"
        work.mkdir(parents=True)
        return work

    def complete(self, key: str) -> dict[str, object] | None:
        """The metadata of a finished image with this key, or None."""
        try:
            meta = json.loads(self.metadata.read_text())
        except (OSError, ValueError):
            return None
        if meta.get("key") != key or not self.image.exists():
            return None
        return dict(meta)


@contextlib.asynccontextmanager
async def held(lock_path: Path, *, timeout_s: float, what: str) -> AsyncIterator[None]:
    """Exclusive flock on ``lock_path``, polled so the wait is bounded and cancellable.

    flock locks belong to the open file, so two builds in one process exclude each other
    as two processes do; the kernel drops the lock if the holder dies. A lock file that
    eviction unlinked while we waited is opened again (its lock guards nothing any more).
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            await _flock(fd, deadline, timeout_s, what)
        except BaseException:
            os.close(fd)
            raise
        if still_named(fd, lock_path):
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)  # drops the lock


async def _flock(fd: int, deadline: float, timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if loop.time() >= deadline:
                raise BuildTimeout(f"waited {timeout_s:g} s for another build of {what}") from None
            await asyncio.sleep(LOCK_POLL_S)


def tree_size(root: Path) -> int:
    """Bytes under ``root`` (a file's size, or the sum over a tree, hard links once)."""
    if not root.is_dir():
        return root.stat().st_size
    seen: set[tuple[int, int]] = set()
    total = 0
    for top, _dirs, files in os.walk(root):
        for name in files:
            info = os.lstat(os.path.join(top, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def remove_tree(path: Path) -> None:
    """Delete a build folder, refusing if anything is still mounted inside it."""
    if not path.exists() and not path.is_symlink():
        return
    mounted = mounts_under(path)
    if mounted:
        raise ImageError(f"not deleting {path}: still mounted there: {mounted}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def remove_workdir(work: Path) -> None:
    """Delete a private build folder; one a mount survived in is left, never deleted through."""
    with contextlib.suppress(ImageError):
        remove_tree(work)


def publish(slot: ImageSlot, built: Path, metadata: Mapping[str, object]) -> None:
    """Move a finished image into place; the metadata, written last, makes it visible.

    Call with the slot's lock held. An existing image (scratch rebuild, or leftovers of a
    build that died before writing metadata) is first moved aside, then deleted.
    """
    slot.metadata.unlink(missing_ok=True)
    old = None
    if slot.image.exists() or slot.image.is_symlink():
        old = built.parent / "replaced"
        os.rename(slot.image, old)
    os.rename(built, slot.image)
    tmp = slot.metadata.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(metadata), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, slot.metadata)
    if old is not None:
        remove_tree(old)
