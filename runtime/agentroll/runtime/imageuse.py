"""Which cached images are in use: decided by file locks the kernel keeps, never guessed.

A sandbox started from an image in an image cache (a folder with a ``.locks/`` folder, as
``agentroll build-image`` makes it) holds a shared flock on the image's use file,
``.locks/<image name>.use``, for its whole life. Eviction takes the same lock exclusively
without waiting and leaves the image alone if it cannot: an image is never deleted under a
running sandbox. The kernel drops the lock when its holder dies, so a crashed server protects
nothing forever. Each hold also stamps the file's mtime: the cache ranks images by last use.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from agentroll.runtime.errors import SandboxStartError

log = logging.getLogger(__name__)

LOCKS_DIR = ".locks"
USE_SUFFIX = ".use"


def use_file(image: Path) -> Path:
    """The use-lock file of a cached image (a rootfs folder or a ``.sif`` file)."""
    return image.parent / LOCKS_DIR / (image.name.removesuffix(".sif") + USE_SUFFIX)


def open_lock(path: Path) -> int:
    """An fd on ``path``, created if missing; not inherited by children."""
    return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)


def still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file ``fd`` is open on (not unlinked or replaced).

    A lock on a file that eviction has since unlinked guards nothing: whoever opens the
    path next gets a new file and a lock of its own.
    """
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


class ImageUse:
    """A held shared lock on one cached copy's use file; ``release`` is idempotent."""

    def __init__(self, image: Path, fd: int) -> None:
        self.image = image
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only fd drops the flock
            self._fd = None


def hold_shared(copy: Path, lock: Path) -> ImageUse | None:
    """A shared hold on ``lock`` for the cached ``copy``, its last use stamped; None when
    eviction is deleting the copy right now or has deleted it. ``OSError`` if unopenable."""
    if not (copy.exists() or copy.is_symlink()):
        return None
    fd = open_lock(lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if not still_named(fd, lock) or not (copy.exists() or copy.is_symlink()):
        os.close(fd)  # evicted between the check above and the lock
        return None
    with contextlib.suppress(OSError):  # the ranking is a hint; the lock is what protects
        os.utime(fd)  # last use
    return ImageUse(copy, fd)


def hold_image(image: Path) -> ImageUse | None:
    """Mark ``image`` in use until ``release``; None for an image outside any image cache.

    Raises ``SandboxStartError`` when the image is being evicted at this very moment or is
    already gone: starting from it would fail half-way instead.
    """
    path = use_file(image)
    if not path.parent.is_dir():
        return None  # not in an image cache: nothing evicts it
    try:
        use = hold_shared(image, path)
    except OSError as exc:  # a read-only cache: whoever can write it can evict it
        log.warning("image %s: cannot open its use lock %s (%s); not protected", image, path, exc)
        return None
    if use is None:
        raise SandboxStartError(
            f"image {image} is being evicted from the image cache, or no longer in it"
        )
    return use
