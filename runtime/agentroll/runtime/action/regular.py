"""Opening files the agent can reach without letting it block the action server.

The agent shares the server's uid, so anything it can name it can replace: with a FIFO (an
`open` that never returns, freezing the single-threaded server or a worker thread holding a
lock), a symbolic link, a device. `open_regular` opens without blocking and without following
a final symbolic link, and refuses anything but a regular file.
"""

from __future__ import annotations

import errno
import os
import stat

_SAFE = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(path: str, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags, mode)` that never blocks and only ever opens a regular file;
    `OSError` (`EINVAL` for a FIFO, device or socket) otherwise. The descriptor is blocking."""
    fd = os.open(path, flags | _SAFE, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
